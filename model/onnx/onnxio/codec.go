package onnxio

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"

	"github.com/streamer-dev/streamer/internal/wire"
)

// Codec checks and encodes the items of one model at the HTTP edge, and is
// used again by the worker to check what it receives: an item that reaches a
// model has passed Check. It implements the HTTP layer's codec interface.
// A Codec is safe for concurrent use.
type Codec struct {
	sig  *Signature
	pads []*padding // per input; nil where the input is not padded
	// outputNames are the outputs' names, quoted for JSON.
	outputNames [][]byte
}

// padding is how one input is padded so that items of different lengths
// share a run.
type padding struct {
	value []byte // one element of the input's dtype
	axes  []bool // per item axis: padded
	spec  float64
}

// NewCodec returns the codec for sig. pad maps input names to the value
// their dynamic non-batch axes are padded with (streamer serve's --pad); it is
// refused when padding cannot work for the model.
func NewCodec(sig *Signature, pad map[string]float64) (*Codec, error) {
	c := &Codec{sig: sig, pads: make([]*padding, len(sig.Inputs))}
	for _, o := range sig.Outputs {
		name, err := json.Marshal(o.Name)
		if err != nil {
			return nil, err
		}
		c.outputNames = append(c.outputNames, name)
	}
	names := make([]string, 0, len(pad))
	for name := range pad {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := c.addPad(name, pad[name]); err != nil {
			return nil, fmt.Errorf("pad %s=%g: %w", name, pad[name], err)
		}
	}
	if err := c.checkPadPartners(); err != nil {
		return nil, err
	}
	return c, c.checkPaddedOutputs()
}

func (c *Codec) addPad(name string, value float64) error {
	i := c.sig.Input(name)
	if i < 0 {
		return fmt.Errorf("the model has no input %q; its inputs are %s", name, c.inputList())
	}
	p := c.sig.Inputs[i]
	if c.sig.Mode != Stacked {
		return fmt.Errorf("items of this model run one by one (%s), so nothing is padded", c.sig.Why)
	}
	if !p.Batched {
		return fmt.Errorf("input %q has no batch axis; it is taken whole from each item", name)
	}
	pd := &padding{axes: make([]bool, len(p.ItemShape)), spec: value}
	dynamic := false
	for k, d := range p.ItemShape {
		pd.axes[k] = d.Dynamic()
		dynamic = dynamic || d.Dynamic()
	}
	if !dynamic {
		return fmt.Errorf("input %q (%s) has no dynamic axis besides the batch axis; there is nothing to pad", name, p.describe())
	}
	v, ok := appendFloat(nil, p.DType, value)
	if !ok {
		return fmt.Errorf("the value does not fit input %q's dtype %s", name, p.DType)
	}
	pd.value = v
	c.pads[i] = pd
	return nil
}

// checkPadPartners refuses padding one input along an axis that another,
// unpadded input shares by name: their lengths must stay equal.
func (c *Codec) checkPadPartners() error {
	for i, pd := range c.pads {
		if pd == nil {
			continue
		}
		for k, padded := range pd.axes {
			param := c.sig.Inputs[i].ItemShape[k].Param
			if !padded || param == "" {
				continue
			}
			for j, q := range c.sig.Inputs {
				for l, d := range q.ItemShape {
					if d.Param == param && (c.pads[j] == nil || !c.pads[j].axes[l]) {
						return fmt.Errorf("pad %s: input %q shares axis %q with it; pad it too (pad %s=VALUE)", c.sig.Inputs[i].Name, q.Name, param, q.Name)
					}
				}
			}
		}
	}
	return nil
}

// checkPaddedOutputs refuses padding where an output's item could not be
// cut back to its own length: an output that declares no shape, or one
// with a dynamic axis besides the batch axis whose name no input axis
// shares. An axis named like a padded input axis is cropped to the item's
// length of it; one named like an unpadded input axis has one length in a
// run (items of other lengths never share it); any other would keep the
// length of the longest item the run held, and the item's answer would
// depend on its batch-mates.
func (c *Codec) checkPaddedOutputs() error {
	if !slices.ContainsFunc(c.pads, func(pd *padding) bool { return pd != nil }) {
		return nil
	}
	named := map[string]bool{}
	for _, in := range c.sig.Inputs {
		for _, d := range in.ItemShape {
			if d.Dynamic() && d.Param != "" {
				named[d.Param] = true
			}
		}
	}
	for _, o := range c.sig.Outputs {
		if o.Shape == nil {
			return fmt.Errorf("output %q declares no shape, so an item's part of it could not be cut back to the item's own length from that of the longest item it ran with; pad only models whose outputs declare their shapes", o.Name)
		}
		for a, d := range o.ItemShape {
			if !d.Dynamic() || named[d.Param] {
				continue
			}
			axis := "an unnamed dynamic axis"
			if d.Param != "" {
				axis = fmt.Sprintf("the dynamic axis %q", d.Param)
			}
			return fmt.Errorf("output %q (%s): its axis %d, %s, is shared by no input axis, so an item's part of it could not be cut back to the item's own length from that of the longest item it ran with; name that axis of the output like the input axis whose length it follows (when exporting from PyTorch, in dynamic_axes), or serve the model without padding", o.Name, o.describe(), a+1, axis)
		}
	}
	return nil
}

// Signature returns the model's signature.
func (c *Codec) Signature() *Signature { return c.sig }

// Padded reports whether input i is padded, and along which item axes.
func (c *Codec) Padded(i int) (axes []bool, value []byte, ok bool) {
	if pd := c.pads[i]; pd != nil {
		return pd.axes, pd.value, true
	}
	return nil, nil, false
}

// Pads returns the padding settings in force, by input name.
func (c *Codec) Pads() map[string]float64 {
	m := map[string]float64{}
	for i, pd := range c.pads {
		if pd != nil {
			m[c.sig.Inputs[i].Name] = pd.spec
		}
	}
	return m
}

// unknownInput refuses an input the model does not take.
func (c *Codec) unknownInput(name string) error {
	if why := c.sig.Fixed(name); why != "" {
		return fmt.Errorf("%s; the model's inputs are %s", why, c.inputList())
	}
	return fmt.Errorf("unknown input %q; the model's inputs are %s", name, c.inputList())
}

func (c *Codec) inputList() string {
	parts := make([]string, len(c.sig.Inputs))
	for i, p := range c.sig.Inputs {
		parts[i] = fmt.Sprintf("%s (%s)", p.Name, p.describe())
	}
	return strings.Join(parts, ", ")
}

// Check verifies one item's inputs against the model: their number, dtypes,
// ranks, fixed axis lengths, data sizes, and that axes sharing a name have
// one length.
func (c *Codec) Check(inputs []Tensor) error {
	if len(inputs) != len(c.sig.Inputs) {
		return fmt.Errorf("the item has %d inputs; the model's inputs are %s", len(inputs), c.inputList())
	}
	for i := range inputs {
		if err := checkTensor(&c.sig.Inputs[i], inputs[i]); err != nil {
			return err
		}
	}
	return c.checkSharedAxes(inputs)
}

func checkTensor(p *Port, t Tensor) error {
	if t.DType != p.DType {
		return fmt.Errorf("input %q: want %s; got dtype %s", p.Name, p.describe(), t.DType)
	}
	ok := len(t.Shape) == len(p.ItemShape)
	for k := 0; ok && k < len(t.Shape); k++ {
		d := p.ItemShape[k]
		ok = t.Shape[k] > 0 && (d.Dynamic() || t.Shape[k] == d.Size)
	}
	if !ok {
		return newBuilder(p).wrongShape(shapeString(t.Shape))
	}
	if err := t.checkData(); err != nil {
		return fmt.Errorf("input %q: %w", p.Name, err)
	}
	return nil
}

// checkSharedAxes refuses an item whose axes named alike (a sequence length
// shared by token ids and their mask) differ in length.
func (c *Codec) checkSharedAxes(inputs []Tensor) error {
	type seen struct {
		input  string
		length int64
	}
	var params map[string]seen
	for i, p := range c.sig.Inputs {
		for k, d := range p.ItemShape {
			if d.Param == "" {
				continue
			}
			if params == nil {
				params = map[string]seen{}
			}
			n := inputs[i].Shape[k]
			if s, ok := params[d.Param]; ok && s.length != n {
				return fmt.Errorf("input %q: axis %d (%s) is %d long, but input %q has %s = %d; axes named alike must agree", p.Name, k, d.Param, n, s.input, d.Param, s.length)
			}
			params[d.Param] = seen{input: p.Name, length: n}
		}
	}
	return nil
}

// Key is the item's batch key: items with equal keys can be stacked into one
// run. It spells the input shapes (padded axes as "*") and, for inputs
// without a batch axis, their dtypes, shapes and values, which must agree
// within a run: the run takes such an input whole from its first item, so
// two items whose values have the same bytes in different shapes must not
// share it. Models whose items run one by one need no key: "".
func (c *Codec) Key(inputs []Tensor) string {
	if c.sig.Mode != Stacked {
		return ""
	}
	b := make([]byte, 0, 32)
	for i, t := range inputs {
		if i > 0 {
			b = append(b, ';')
		}
		if !c.sig.Inputs[i].Batched {
			b = append(b, t.DType.String()...)
			b = append(b, '[')
			b = appendShapeKey(b, t.Shape, nil)
			b = append(b, "]="...)
			b = appendValueKey(b, t.Data)
			continue
		}
		var padded []bool
		if pd := c.pads[i]; pd != nil {
			padded = pd.axes
		}
		b = appendShapeKey(b, t.Shape, padded)
	}
	return string(b)
}

// appendShapeKey spells a shape as "2x3", with the axes padded marks as
// "*".
func appendShapeKey(b []byte, shape []int64, padded []bool) []byte {
	for k, d := range shape {
		if k > 0 {
			b = append(b, 'x')
		}
		if padded != nil && padded[k] {
			b = append(b, '*')
		} else {
			b = strconv.AppendInt(b, d, 10)
		}
	}
	return b
}

// appendValueKey spells small values in full and large ones by digest.
func appendValueKey(b, data []byte) []byte {
	if len(data) <= 32 {
		return hex.AppendEncode(b, data)
	}
	sum := sha256.Sum256(data)
	return hex.AppendEncode(b, sum[:16])
}

// FromJSON checks and encodes one item given as JSON.
func (c *Codec) FromJSON(raw json.RawMessage) ([]byte, string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, "", fmt.Errorf("empty item; %s", c.want())
	}
	var inputs []Tensor
	var err error
	if raw[0] == '{' {
		inputs, err = c.jsonObject(raw)
	} else if len(c.sig.Inputs) != 1 {
		return nil, "", fmt.Errorf("the model has %d inputs; %s", len(c.sig.Inputs), c.want())
	} else {
		var t Tensor
		t, err = parseJSON(&c.sig.Inputs[0], raw)
		inputs = []Tensor{t}
	}
	if err != nil {
		return nil, "", err
	}
	return c.finish(inputs)
}

// want says what an item should look like.
func (c *Codec) want() string {
	if len(c.sig.Inputs) == 1 {
		p := c.sig.Inputs[0]
		return fmt.Sprintf("send input %q (%s) as nested arrays, or an object {%q: ...}", p.Name, p.describe(), p.Name)
	}
	return "send an object keyed by input name: " + c.inputList()
}

func (c *Codec) jsonObject(raw []byte) ([]Tensor, error) {
	raws, err := c.jsonFields(raw)
	if err != nil {
		return nil, err
	}
	inputs := make([]Tensor, len(c.sig.Inputs))
	for i, p := range c.sig.Inputs {
		if raws[i] == nil {
			return nil, fmt.Errorf("missing input %q (%s); the model's inputs are %s", p.Name, p.describe(), c.inputList())
		}
		var err error
		if inputs[i], err = parseJSON(&c.sig.Inputs[i], raws[i]); err != nil {
			return nil, err
		}
	}
	return inputs, nil
}

// jsonFields splits a JSON object into the texts of the inputs it names,
// in the model's input order; an input not given is nil.
func (c *Codec) jsonFields(raw []byte) ([][]byte, error) {
	raws := make([][]byte, len(c.sig.Inputs))
	s := wire.NewJSONScanner(raw)
	s.Consume('{') // FromJSON saw it
	for more := !s.Consume('}'); more; {
		name, err := s.Key()
		if err != nil {
			return nil, fmt.Errorf("malformed item object: %w", err)
		}
		value, err := s.Skip(1)
		if err != nil {
			return nil, fmt.Errorf("malformed item object: %w", err)
		}
		i := c.sig.Input(string(name))
		if i < 0 {
			return nil, c.unknownInput(string(name))
		}
		if raws[i] != nil {
			return nil, fmt.Errorf("input %q is given twice", name)
		}
		raws[i] = value
		switch {
		case s.Consume('}'):
			more = false
		case !s.Consume(','):
			return nil, fmt.Errorf("malformed item object: %w", s.Unexpected("after an object value"))
		}
	}
	if err := s.End(); err != nil {
		return nil, fmt.Errorf("malformed item object: %w", err)
	}
	return raws, nil
}

func (c *Codec) finish(inputs []Tensor) ([]byte, string, error) {
	if err := c.Check(inputs); err != nil {
		return nil, "", err
	}
	return EncodeItem(inputs), c.Key(inputs), nil
}

// FromMsgpack checks and encodes one item given as msgpack: nested arrays or
// a tensor map for a model with one input, or a map keyed by input name
// whose values are nested arrays or tensor maps.
func (c *Codec) FromMsgpack(raw msgpack.RawMessage) ([]byte, string, error) {
	r := newReader(raw)
	defer r.Release()
	code, err := r.PeekCode()
	if err != nil {
		return nil, "", fmt.Errorf("malformed item: %w", err)
	}
	var inputs []Tensor
	switch {
	case wire.IsMap(code) && !c.isTensorMap(raw):
		inputs, err = c.msgpackObject(r)
	case len(c.sig.Inputs) != 1:
		return nil, "", fmt.Errorf("the model has %d inputs; %s", len(c.sig.Inputs), c.want())
	default:
		var t Tensor
		t, err = parseMsgpack(&c.sig.Inputs[0], r)
		inputs = []Tensor{t}
	}
	if err != nil {
		return nil, "", err
	}
	if r.Len() != 0 {
		return nil, "", fmt.Errorf("malformed item: %d bytes after the value", r.Len())
	}
	return c.finish(inputs)
}

// isTensorMap reports whether the map that starts raw is a tensor map (its
// "data" entry holds bytes) rather than inputs by name.
func (c *Codec) isTensorMap(raw []byte) bool {
	r := newReader(raw)
	defer r.Release()
	n, err := r.mapLen()
	if err != nil {
		return false
	}
	for range n {
		key, err := r.Decoder().DecodeString()
		if err != nil {
			return false
		}
		if key == keyData {
			code, err := r.PeekCode()
			return err == nil && msgpcode.IsBin(code)
		}
		if _, err := r.Skip(1); err != nil {
			return false
		}
	}
	return false
}

func (c *Codec) msgpackObject(r reader) ([]Tensor, error) {
	n, err := r.mapLen()
	if err != nil {
		return nil, fmt.Errorf("malformed item: %w", err)
	}
	inputs := make([]Tensor, len(c.sig.Inputs))
	have := make([]bool, len(c.sig.Inputs))
	for range n {
		name, err := r.Decoder().DecodeString()
		if err != nil {
			return nil, fmt.Errorf("malformed item: input name: %w", err)
		}
		i := c.sig.Input(name)
		if i < 0 {
			return nil, c.unknownInput(string(name))
		}
		if have[i] {
			return nil, fmt.Errorf("input %q is given twice", name)
		}
		if inputs[i], err = parseMsgpack(&c.sig.Inputs[i], r); err != nil {
			return nil, err
		}
		have[i] = true
	}
	for i, p := range c.sig.Inputs {
		if !have[i] {
			return nil, fmt.Errorf("missing input %q (%s); the model's inputs are %s", p.Name, p.describe(), c.inputList())
		}
	}
	return inputs, nil
}

// AppendJSON appends the JSON form of one output (as EncodeOutput wrote it):
// nested arrays for a model with one output, an object keyed by output name
// for a model with several. Non-finite floats, which JSON cannot spell, are
// written as null.
func (c *Codec) AppendJSON(dst []byte, output []byte) ([]byte, error) {
	outs, err := DecodeOutput(c.sig, output)
	if err != nil {
		return dst, fmt.Errorf("model output: %w", err)
	}
	if len(outs) == 1 {
		return appendJSONTensor(dst, outs[0]), nil
	}
	dst = append(dst, '{')
	for i, t := range outs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, c.outputNames[i]...)
		dst = append(dst, ':')
		dst = appendJSONTensor(dst, t)
	}
	return append(dst, '}'), nil
}

// appendJSONTensor writes t as nested arrays; a rank-0 tensor is a bare value.
func appendJSONTensor(dst []byte, t Tensor) []byte {
	size := t.DType.Size()
	var walk func(dst []byte, shape []int64, data []byte) []byte
	walk = func(dst []byte, shape []int64, data []byte) []byte {
		if len(shape) == 0 {
			return appendJSONElement(dst, t.DType, data[:size])
		}
		dst = append(dst, '[')
		n := int(shape[0])
		step := 0
		if n > 0 {
			step = len(data) / n
		}
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = walk(dst, shape[1:], data[i*step:(i+1)*step])
		}
		return append(dst, ']')
	}
	return walk(dst, slices.Clip(t.Shape), t.Data)
}

func appendJSONElement(dst []byte, d DType, b []byte) []byte {
	switch d {
	case Float16:
		// The shortest text that reads back as the same float32, which
		// every half is: a client reading into float32 or float64 gets the
		// half's own value (65504, where the shortest text of the half
		// alone would be 65500), and one reading into float16 the same half.
		return appendJSONFloat(dst, Float16Frombits(le16(b)), 32)
	case Float32:
		return appendJSONFloat(dst, float64(math.Float32frombits(le32(b))), 32)
	case Float64:
		return appendJSONFloat(dst, math.Float64frombits(le64(b)), 64)
	case Bool:
		return strconv.AppendBool(dst, b[0] != 0)
	case Int8:
		return strconv.AppendInt(dst, int64(int8(b[0])), 10)
	case Int16:
		return strconv.AppendInt(dst, int64(int16(le16(b))), 10)
	case Int32:
		return strconv.AppendInt(dst, int64(int32(le32(b))), 10)
	case Int64:
		return strconv.AppendInt(dst, int64(le64(b)), 10)
	case Uint8:
		return strconv.AppendUint(dst, uint64(b[0]), 10)
	case Uint16:
		return strconv.AppendUint(dst, uint64(le16(b)), 10)
	case Uint32:
		return strconv.AppendUint(dst, uint64(le32(b)), 10)
	}
	return strconv.AppendUint(dst, le64(b), 10)
}

func appendJSONFloat(dst []byte, f float64, bitSize int) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bitSize)
}

func le16(b []byte) uint16 { return uint16(b[0]) | uint16(b[1])<<8 }
func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
func le64(b []byte) uint64 { return uint64(le32(b)) | uint64(le32(b[4:]))<<32 }
