// Command fillmask is a streamer model plugin that fills the [MASK] in a
// sentence, the demo task of the original service-streamer:
//
//	"Happy birthday to [MASK]." → "you"
//
// Its model is a real, small one: an interpolated Kneser-Ney n-gram language
// model, built when the plugin starts from a text corpus (corpus.txt, shipped
// inside the binary, or any file given with --plugin-arg corpus=PATH). To
// fill a mask it tries every word of the corpus in its place and keeps the
// one that makes the sentence most probable.
//
// Settings (--plugin-arg key=value):
//
//	corpus=PATH  train on this text file instead of the built-in corpus
//	order=N      n-gram order, 2 to 4 (default 4)
//	top=K        answer with the K best words and their log probabilities
//	             instead of the best word alone
//
// Build and serve:
//
//	go build -o bin/fillmask ./examples/fillmask
//	streamer serve --plugin bin/fillmask --workers 2
//	curl -d '{"inputs": ["Happy birthday to [MASK]."]}' localhost:5005/predict
package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/streamer-dev/streamer/model/plugin/sdk"
)

//go:embed corpus.txt
var builtinCorpus string

// fillMask is the plugin's model.
type fillMask struct {
	lm  *NGram
	top int
}

// Init trains the language model on the corpus.
func (f *fillMask) Init(_ context.Context, cfg sdk.Config) (sdk.Info, error) {
	order, err := strconv.Atoi(cfg.Arg("order", "4"))
	if err != nil {
		return sdk.Info{}, fmt.Errorf("order %q: want a number", cfg.Args["order"])
	}
	f.top, err = strconv.Atoi(cfg.Arg("top", "1"))
	if err != nil || f.top < 1 {
		return sdk.Info{}, fmt.Errorf("top %q: want a number of at least 1", cfg.Args["top"])
	}
	var corpus io.Reader = strings.NewReader(builtinCorpus)
	source := "built-in corpus"
	if path := cfg.Arg("corpus", ""); path != "" {
		file, err := os.Open(path)
		if err != nil {
			return sdk.Info{}, fmt.Errorf("corpus: %w", err)
		}
		defer file.Close()
		corpus, source = file, path
	}
	if f.lm, err = Train(corpus, order); err != nil {
		return sdk.Info{}, fmt.Errorf("train on %s: %w", source, err)
	}
	if cfg.Device == "cuda" {
		fmt.Fprintln(os.Stderr, "fillmask: an n-gram model has nothing to gain from a GPU; running on the CPU")
	}
	fmt.Fprintf(os.Stderr, "fillmask: %d-gram model of %d tokens trained on %s\n", order, f.lm.Vocabulary(), source)
	return sdk.Info{Name: fmt.Sprintf("fillmask %d-gram", order), Device: "cpu"}, nil
}

// Predict fills the mask of each sentence.
func (f *fillMask) Predict(_ context.Context, items []sdk.Item) ([]sdk.Result, error) {
	results := make([]sdk.Result, len(items))
	for i, item := range items {
		var sentence string
		if err := item.Decode(&sentence); err != nil {
			results[i] = sdk.Failf("want a sentence with one [MASK] as a string: %v", err)
			continue
		}
		guesses, err := f.lm.Fill(sentence, f.top)
		switch {
		case err != nil:
			results[i] = sdk.Fail(err)
		case f.top == 1:
			results[i] = sdk.OK(guesses[0].Word)
		default:
			results[i] = sdk.OK(guesses)
		}
	}
	return results, nil
}

func main() {
	sdk.Serve(&fillMask{})
}
