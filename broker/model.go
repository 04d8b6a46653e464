package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ModelID names the model that front ends and nodes serve, for the check
// that all those under one key prefix agree: a node of another model
// would answer the items it reads with its own answers, and a front end
// that writes items for another model would have them refused, or read
// their answers wrongly. A zero ModelID checks nothing.
//
// To share a prefix with front ends or nodes of streamer serve, name the
// model as it does: Wire "generic" for a built-in model or a plugin, whose
// items are the HTTP API's generic ones, and Name the --model's runner
// (as "sleep", "echo"; for a plugin, the runner, a space and the plugin
// file's base name); for an ONNX model, Wire is "onnx " and the JSON of
// its inputs and outputs as onnx.Description holds them, and Name "onnx".
//
// The check compares too how this version of the package lays out what it
// keeps in Redis (see entryLayout): a front end or node of a version that
// lays it out otherwise takes no part either, and says so
// (ErrVersionMismatch). A zero ModelID checks no version either.
type ModelID struct {
	// Wire is how items and answers are written on the streams (for
	// streamer serve, the codec of the HTTP layer: the generic one, or an
	// ONNX model's inputs and outputs). Front ends and nodes must agree on
	// it.
	Wire string
	// Name is the model the nodes run, which they must agree on too: two
	// models may write alike and answer differently. A front end's does
	// not count.
	Name string
	// Label names the model for people, in messages; it is not compared.
	Label string
	// Version is a short digest of what makes the model's answers (for
	// streamer serve, the first 16 hex digits of a SHA-256 of the runner,
	// the ONNX file's or the plugin binary's SHA-256, the plugin's
	// arguments, the padding, a built-in's settings; not paths, devices
	// or threads, which differ between machines serving one model). It
	// refuses nothing, as a rolling upgrade mixes two: nodes publish
	// theirs as they beat, and front ends and nodes count those of the
	// nodes heard from within 3 s (NodeStats and FrontEndStats'
	// ModelVersions), warning while there is more than one, as callers
	// then get the answers of either; a front end warns too when its
	// own is none of the nodes'. Empty is no version: a node of none
	// publishes nothing, and a front end of none compares nothing.
	Version string
}

// ErrModelMismatch says that the nodes under the key prefix serve another
// model than this front end or node: it takes no part until they agree.
var ErrModelMismatch = errors.New("broker: another model is served under this key prefix")

// ErrVersionMismatch says that the nodes under the key prefix run another
// version of streamer, one that lays out its entries in Redis otherwise
// than this one (see ModelID): the front end or node takes no part, as
// for another model, and errors.Is finds ErrModelMismatch in it too.
var ErrVersionMismatch error = versionMismatch{}

type versionMismatch struct{}

func (versionMismatch) Error() string {
	return "broker: another version of streamer serves this key prefix"
}

func (versionMismatch) Is(target error) bool { return target == ErrModelMismatch }

// entryLayout numbers the layout of what front ends and nodes keep in
// Redis: the keys, the fields of items and answers and how they are
// written, and the scripts that read and write them. A front end or node
// that reads another layout than it finds could misread every item or
// answer, so the model's check (see ModelID) compares it too. Raise it
// with any change that a front end or node of the last layout would
// misread; TestTheLayoutIsNumbered keeps a fingerprint of the layout, and
// fails when it changes under the same number unless told the change is
// one they read alike.
const entryLayout = "1"

// layoutMark joins the entries' layout to the wire in the model key's
// wire field (see heldWire): the versions from before layouts were
// numbered compare that field alone, and so refuse a prefix of a numbered
// layout as they refuse another model's, while this one and those after
// it read the layout there.
const layoutMark = " @layout "

// modelTTL is how long the model of a prefix outlives its last node: the
// nodes keep it, at every heartbeat, and another model may take the
// prefix once every node of the last has been gone this long.
const modelTTL = 30 * time.Second

// modelScript says which model the prefix serves: the node's own when the
// prefix has none, or kept for it when the node's agrees (its time to
// live renewed, and its label the node's: after a rolling upgrade, the
// label names a model that runs, not the first node's), else the other,
// which the node must not serve beside. The wire it is given and keeps
// ends with the entries' layout (see layoutMark).
//
//	KEYS[1] the model key
//	ARGV    the node's wire, name and label, the time to live (ms)
var modelScript = redis.NewScript(`
local held = redis.call('HMGET', KEYS[1], 'wire', 'name', 'label')
if not held[1] then
  redis.call('HSET', KEYS[1], 'wire', ARGV[1], 'name', ARGV[2], 'label', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {ARGV[1], ARGV[2], ARGV[3]}
end
if held[1] == ARGV[1] and held[2] == ARGV[2] then
  redis.call('HSET', KEYS[1], 'label', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
return held
`)

// modelFields are the fields of the model key, as heldModel reads them.
// The key and its fields stay as they are from one version to the next:
// they are how versions tell each other apart.
var modelFields = []string{"wire", "name", "label"}

// layoutWire is the wire field of the model key for a model of wire w.
func layoutWire(w string) string { return w + layoutMark + entryLayout }

// heldModel reads the answer of modelScript or of an HMGET of the model
// key's modelFields: the model the prefix serves, the layout of its
// entries ("" when written before layouts were numbered), and whether it
// has one.
func heldModel(fields []any) (m ModelID, layout string, held bool) {
	str := func(i int) string {
		if i < len(fields) {
			s, _ := fields[i].(string)
			return s
		}
		return ""
	}
	m = ModelID{Wire: str(0), Name: str(1), Label: str(2)}
	held = m.Wire != ""
	if i := strings.LastIndex(m.Wire, layoutMark); i >= 0 {
		m.Wire, layout = m.Wire[:i], m.Wire[i+len(layoutMark):]
	}
	return m, layout, held
}

// mismatch is the error of a front end or node, serving mine, under a
// prefix whose nodes serve theirs, laid out as layout says: an
// ErrVersionMismatch when the layouts differ (what else differs then
// says little: another version may write the same model otherwise), else
// an ErrModelMismatch.
func mismatch(who, where, prefix string, theirs, mine ModelID, layout, mend string) error {
	kind := ErrModelMismatch
	if layout != entryLayout {
		kind = ErrVersionMismatch
	}
	return fmt.Errorf("%w: the nodes under the key prefix %q on redis at %s serve %s; this %s serves %s%s: %s",
		kind, prefix, where, theirs.describe(), who, mine.describe(), differences(who, theirs, mine, layout), mend)
}

// describe names m in a message.
func (m ModelID) describe() string {
	switch {
	case m.Label != "":
		return fmt.Sprintf("%q", m.Label)
	case m.Name != "":
		return fmt.Sprintf("%q", m.Name)
	}
	return "a model of no name"
}

// differences says, for a message, what the check compared and found to
// differ between theirs, laid out as layout says, and mine, as the names
// people read (labels) may be alike: how items are written, the version
// that lays them out, and, for a node, the model's name.
func differences(who string, theirs, mine ModelID, layout string) string {
	var d []string
	if theirs.Wire != mine.Wire {
		d = append(d, fmt.Sprintf("the nodes write items as %s, this %s as %s", clip(theirs.Wire), who, clip(mine.Wire)))
	}
	switch {
	case layout == entryLayout:
	case layout == "":
		d = append(d, fmt.Sprintf("the nodes' entries are laid out by an older version of streamer, of no layout number, this %s's as %q", who, entryLayout))
	default:
		d = append(d, fmt.Sprintf("the nodes' entries are laid out by another version of streamer, as layout %s, this %s's as %q", clip(layout), who, entryLayout))
	}
	if who == "node" && theirs.Name != mine.Name {
		d = append(d, fmt.Sprintf("the nodes' model is named %q, this node's %q", theirs.Name, mine.Name))
	}
	if len(d) == 0 {
		return ""
	}
	return " (" + strings.Join(d, "; ") + ")"
}

// versionMend is what mends a mismatch of layouts, for a message.
var versionMend = fmt.Sprintf("front ends and nodes under one prefix must run one version of streamer: upgrade them together (the prefix keeps the model of the nodes there %s after the last one has gone), or run the new version under another key prefix (--stream-prefix; in Go, Config.Prefix) and move the traffic to it", modelTTL)

// clip quotes s for a message, cut to its first 60 bytes: an ONNX model's
// wire is the JSON of all its inputs and outputs.
func clip(s string) string {
	if len(s) > 60 {
		return fmt.Sprintf("%q…", s[:60])
	}
	return fmt.Sprintf("%q", s)
}

// checkModel has the node's model kept for the prefix, or finds that the
// prefix serves another: the node then takes no items, beats as no live
// node, and says why (see refusal) until the prefix's model is its own
// again. A node without a model (an embedder's that names none) checks
// nothing.
func (n *Node) checkModel(ctx context.Context) error {
	mine := n.cfg.Model
	if mine.Wire == "" {
		return nil
	}
	fields, err := modelScript.Run(ctx, n.rdb, []string{n.k.model}, layoutWire(mine.Wire), mine.Name, mine.Label, modelTTL.Milliseconds()).Slice()
	if redis.HasErrorPrefix(err, "NOPERM") {
		modelRefused(n.cfg.Logger, &n.modelLogged, n.k.model, err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("redis at %s: %w", n.where, err)
	}
	err = n.modelMismatch(fields)
	if err == nil {
		if n.mismatch.Swap(nil) != nil {
			n.cfg.Logger.Info("the nodes under this key prefix serve this node's model again; it takes items", "node", n.cfg.Name)
		}
		return nil
	}
	msg := err.Error()
	if n.mismatch.Swap(&msg) == nil {
		n.cfg.Logger.Error("this node takes no items", "node", n.cfg.Name, "err", err)
	}
	return err
}

// modelMismatch is the error of the node when the model the prefix
// serves, as read (fields, of modelScript or an HMGET of modelFields), is
// another than its own; nil when it is its own, or the prefix has none.
func (n *Node) modelMismatch(fields []any) error {
	mine := n.cfg.Model
	theirs, layout, held := heldModel(fields)
	if !held || theirs.Wire == mine.Wire && theirs.Name == mine.Name && layout == entryLayout {
		return nil
	}
	mend := fmt.Sprintf("give it another key prefix (--stream-prefix; in Go, Config.Prefix), or stop those nodes first (the prefix keeps their model %s after the last one)", modelTTL)
	if layout != entryLayout {
		mend = versionMend
	}
	return mismatch("node", n.where, n.cfg.Prefix, theirs, mine, layout, mend)
}

// CheckModel reads, before the node starts, the model the nodes under its
// prefix serve, and returns an ErrModelMismatch when it is another than
// the node's: a server checks so before its workers load the model, which
// may take minutes, so that a node started with the wrong model or prefix
// is told at once. It takes nothing in Redis (Start does), and returns nil
// when the prefix serves the node's model or none, when the node has no
// model to compare, and when Redis does not answer or refuses the read:
// Start says those.
func (n *Node) CheckModel(ctx context.Context) error {
	if n.cfg.Model.Wire == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	fields, err := n.rdb.HMGet(ctx, n.k.model, modelFields...).Result()
	if err != nil {
		return nil
	}
	return n.modelMismatch(fields)
}

// noteModel compares the model the prefix serves, as a check read
// it (fields, of an HMGET), with the front end's wire: a front end that
// writes items otherwise than the nodes read them takes no requests, and
// says why (see unavailable), until they agree. A front end without a
// model checks nothing.
func (fe *FrontEnd) noteModel(fields []any) error {
	mine := fe.cfg.Model
	theirs, layout, held := heldModel(fields)
	// Another name alone does not stop it (a front end's model only says
	// how to write items), but its clients see its name, as the v2
	// routes' model, while the nodes run theirs: said once.
	// Said only of a front end that takes requests: one that does not
	// says why, and that is not it.
	if mine.Wire == "" || !held || (theirs.Wire == mine.Wire && layout == entryLayout) {
		if fe.mismatch.Swap(nil) != nil {
			fe.cfg.Logger.Info("this front end writes items as the nodes read them again; it takes requests", "redis", fe.where)
		}
		otherName := mine.Name != "" && held && theirs.Name != mine.Name
		if fe.otherName.Swap(otherName) != otherName && otherName {
			fe.cfg.Logger.Warn("the nodes under this key prefix serve a model of another name than this front end's; it serves their answers under its own name (give it the nodes' --model)",
				"nodes", theirs.describe(), "front_end", mine.describe(), "redis", fe.where, "prefix", fe.cfg.Prefix)
		}
		return nil
	}
	mend := "give it the nodes' model (--model; in Go, Config.Model)"
	if layout != entryLayout {
		mend = versionMend
	}
	err := mismatch("front end", fe.where, fe.cfg.Prefix, theirs, mine, layout, mend)
	if fe.mismatch.Swap(&err) == nil {
		fe.cfg.Logger.Error("this front end takes no requests", "err", err)
	}
	return err
}

// modelRefused logs, once, that Redis refuses a front end's or a node's
// read of the model key with err (its user's ACL leaves the key out, as
// one written for an earlier version would): it serves on without the
// check that the prefix serves one model.
func modelRefused(log *slog.Logger, logged *atomic.Bool, key string, err error) {
	if !logged.Swap(true) {
		log.Warn("redis refuses the model's check: the check that the front ends and nodes under this prefix serve one model, of one version of streamer, is off (let the user run scripts, EVALSHA and EVAL, and read and write "+key+")", "err", err)
	}
}
