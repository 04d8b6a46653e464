// Command gen writes streamer's test and demo ONNX models: the test models
// into testdata/models and the demo model next to the package that embeds
// it. Run it from the repository root:
//
//	go run ./testdata/gen
//
// The weights come from fixed seeds, so the files only change when the
// models do. With -check it writes nothing and fails when a committed file
// differs from what it would write.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/streamer-dev/streamer/model/onnx/onnxtest"
)

func main() {
	root := flag.String("root", ".", "repository root")
	check := flag.Bool("check", false, "only check that the committed models are up to date")
	flag.Parse()
	if err := run(*root, *check); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(root string, check bool) error {
	for _, name := range onnxtest.Names() {
		data, err := onnxtest.Build(name)
		if err != nil {
			return err
		}
		path := filepath.Join(root, "testdata", "models", name+".onnx")
		if name == onnxtest.Demo {
			path = filepath.Join(root, "model", "onnx", "demo", "demo.onnx")
		}
		if check {
			old, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.Equal(old, data) {
				return fmt.Errorf("%s is out of date; run go run ./testdata/gen", path)
			}
			continue
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Printf("wrote %s (%d bytes)\n", path, len(data))
	}
	return nil
}
