package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/load"
	"github.com/streamer-dev/streamer/model/onnx"
	"github.com/streamer-dev/streamer/model/plugin"
)

// TestAModelsVersionIsWhatMakesItsAnswers: the version that nodes under
// one prefix publish (see broker.ModelID.Version) differs between models
// that answer otherwise under one name and wire (other weights, plugin
// arguments, binaries, padding, a built-in's settings), and not between
// machines that serve one model (their paths, devices, threads, socket
// folders). A plugin argument's value, which may be a secret, is not in
// it.
func TestAModelsVersionIsWhatMakesItsAnswers(t *testing.T) {
	dir := t.TempDir()
	binary := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	pluginA, pluginA2, pluginB := binary("a", "#!/bin/sh\n# one\n"), binary("a2", "#!/bin/sh\n# one\n"), binary("b", "#!/bin/sh\n# two\n")
	if err := os.Mkdir(filepath.Join(dir, "elsewhere"), 0o755); err != nil {
		t.Fatal(err)
	}
	pluginAElsewhere := filepath.Join(dir, "elsewhere", "a")
	if err := os.Link(pluginA, pluginAElsewhere); err != nil {
		t.Fatal(err)
	}
	mlp, err := filepath.Abs("../../testdata/models/mlp.onnx")
	if err != nil {
		t.Fatal(err)
	}
	mlpCopy := filepath.Join(dir, "mlp.onnx")
	data, err := os.ReadFile(mlp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mlpCopy, data, 0o644); err != nil {
		t.Fatal(err)
	}
	builtin := func(name string) model.Spec {
		spec, err := load.Parse(name, onnx.Settings{})
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	onnxModel := func(s onnx.Settings) model.Spec {
		spec, err := s.Spec()
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	pluginModel := func(s plugin.Settings) model.Spec {
		spec, err := s.Spec()
		if err != nil {
			t.Fatal(err)
		}
		return spec
	}
	for _, tc := range []struct {
		name string
		a, b model.Spec
		same bool
	}{
		{"sleep's costs", builtin("sleep:10ms,100us"), builtin("sleep:10ms,200us"), false},
		{"sleep's costs written otherwise", builtin("sleep:10ms,100us"), builtin("sleep:10ms,0.1ms"), true},
		{"echo and sleep", builtin("echo"), builtin("sleep:0s,0s"), false},
		{"other weights of the same inputs", onnxModel(onnx.Settings{Path: "demo"}), onnxModel(onnx.Settings{Path: mlp}), false},
		{"the same file elsewhere", onnxModel(onnx.Settings{Path: mlp}), onnxModel(onnx.Settings{Path: mlpCopy, Device: "cuda", IntraOpThreads: 4, Library: "/opt/ort.so"}), true},
		{"padding", onnxModel(onnx.Settings{Path: mlp}), onnxModel(onnx.Settings{Path: mlp, Pad: onnx.Pads{"x": -1}}), false},
		{"plugin arguments", pluginModel(plugin.Settings{Path: pluginA, Args: map[string]string{"top": "3"}}), pluginModel(plugin.Settings{Path: pluginA, Args: map[string]string{"top": "5"}}), false},
		{"plugin arguments' order", pluginModel(plugin.Settings{Path: pluginA, Args: map[string]string{"a": "1", "b": "2"}}), pluginModel(plugin.Settings{Path: pluginA, Args: map[string]string{"b": "2", "a": "1"}}), true},
		{"another binary of the same name", pluginModel(plugin.Settings{Path: pluginA}), pluginModel(plugin.Settings{Path: pluginB}), false},
		{"the same binary elsewhere, on another device and sockets", pluginModel(plugin.Settings{Path: pluginA}), pluginModel(plugin.Settings{Path: pluginAElsewhere, Device: "cuda", SocketDir: dir, StartTimeout: 5}), true},
		{"a copy of the binary", pluginModel(plugin.Settings{Path: pluginA}), pluginModel(plugin.Settings{Path: pluginA2}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			va, vb := answersVersion(tc.a), answersVersion(tc.b)
			if va == "" || vb == "" || len(va) != 16 {
				t.Fatalf("versions %q and %q; want 16 hex digits each", va, vb)
			}
			if (va == vb) != tc.same {
				t.Errorf("versions %q of %s and %q of %s; want them the same: %v", va, tc.a, vb, tc.b, tc.same)
			}
		})
	}
	t.Run("a front end without the binary", func(t *testing.T) {
		spec, err := plugin.Settings{Path: filepath.Join(dir, "none")}.Spec()
		if err != nil {
			t.Fatal(err)
		}
		if v := answersVersion(spec); v != "" {
			t.Errorf("version %q of a plugin whose binary is not there; want none", v)
		}
	})
	t.Run("no secret in it", func(t *testing.T) {
		const secret = "hunter2"
		spec := pluginModel(plugin.Settings{Path: pluginA, Args: map[string]string{"token": secret}})
		sum := sha256.Sum256([]byte(secret))
		id := modelID(spec, nil, pluginA, "plugin "+pluginA)
		if strings.Contains(id.Version, secret) || strings.Contains(id.Version, hex.EncodeToString(sum[:])[:16]) || id.Version == "" {
			t.Errorf("version %q of a plugin with a secret argument", id.Version)
		}
	})
}
