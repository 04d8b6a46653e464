package httpapi

// This file is the seam between the Open Inference Protocol (KServe v2)
// routes and the served model: the routes speak tensors, a TensorModel
// turns one batch row of them into one of the model's items and one item's
// answer back into tensors, so that the batcher underneath stays as it is.

// TensorModel is the served model as the v2 protocol sees it. Config.Tensors
// holds one; the model runners provide theirs (ONNX models their inputs and
// outputs, the built-ins and plugins one BYTES input and one BYTES output).
type TensorModel interface {
	// Metadata describes the model for GET /v2/models/{name}; its Name is
	// the one the routes answer to.
	Metadata() ModelMetadata
	// Item encodes one item from its inputs, given in Metadata's order, all
	// present: for a batched input the item's row (the request's first axis
	// removed), for an unbatched one the whole tensor as sent. It returns
	// the item and its batch key (items with different keys never share a
	// batch), or an error naming the input and what is wrong, for the
	// client (a 400).
	Item(inputs []Tensor) (item []byte, key string, err error)
	// Outputs decodes one item's answer into the model's outputs, in
	// Metadata's order, each without the batch axis.
	Outputs(answer []byte) ([]Tensor, error)
}

// ModelMetadata is the v2 model metadata answer.
type ModelMetadata struct {
	Name     string       `json:"name"`
	Versions []string     `json:"versions,omitempty"`
	Platform string       `json:"platform"`
	Inputs   []TensorSpec `json:"inputs"`
	Outputs  []TensorSpec `json:"outputs"`
	// Fixed, when set, says why a caller may not send an input of the
	// model that is not among Inputs ("" for a name it does not know).
	Fixed func(name string) string `json:"-"`
}

// TensorSpec describes one input or output of the model.
type TensorSpec struct {
	Name string `json:"name"`
	// Datatype is the v2 name: BOOL, UINT8 … UINT64, INT8 … INT64, FP16,
	// FP32, FP64 or BYTES.
	Datatype string `json:"datatype"`
	// Shape is the shape a request sends, the batch axis first when
	// Batched; -1 marks a variable axis, and the batch axis is always -1.
	Shape []int64 `json:"shape"`
	// Batched says the first axis is the request's batch axis: each of its
	// rows is one item. An unbatched input is sent whole to every item.
	Batched bool `json:"-"`
}

// Tensor is one named tensor of a request, an item or an answer.
type Tensor struct {
	Name     string
	Datatype string
	Shape    []int64
	// Data holds the elements in row-major order as the binary tensor
	// extension lays them out: little-endian fixed-size numbers, BOOL as
	// one byte (0 or 1) each, FP16 as IEEE half floats, and BYTES as a
	// 4-byte little-endian length followed by that many bytes, per element.
	Data []byte
}
