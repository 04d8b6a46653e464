package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/streamer-dev/streamer/model"
	"github.com/streamer-dev/streamer/model/plugin"
)

func TestItemDecode(t *testing.T) {
	enc := func(v any) Item {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var s string
	if err := enc("Happy birthday to [MASK].").Decode(&s); err != nil || s != "Happy birthday to [MASK]." {
		t.Errorf("string item: %q, %v", s, err)
	}
	var point struct {
		X float64 `msgpack:"x"`
		Y float64 `msgpack:"y"`
	}
	if err := enc(map[string]any{"x": 1.5, "y": int64(-2)}).Decode(&point); err != nil || point.X != 1.5 || point.Y != -2 {
		t.Errorf("object item: %+v, %v", point, err)
	}
	var n int
	err := enc("not a number").Decode(&n)
	if err == nil || !strings.Contains(err.Error(), "item does not decode into *int") {
		t.Errorf("decoding a string into an int: %v, want an error naming the type", err)
	}

	// A null is no string, number or struct: msgpack alone would leave
	// the zero value and no error, and a plugin answer "" for it.
	for _, target := range []any{&s, &n, &point, new(bool)} {
		if err := enc(nil).Decode(target); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("item is null, which does not decode into %T", target)) {
			t.Errorf("decoding null into %T: %v, want an error saying the item is null", target, err)
		}
	}
	// What can be nil takes it.
	m, p := map[string]any{"k": 1}, &s
	var a any
	for _, target := range []any{&m, &p, &a} {
		if err := enc(nil).Decode(target); err != nil {
			t.Errorf("decoding null into %T: %v", target, err)
		}
	}
	if m != nil || p != nil || a != nil {
		t.Errorf("null decoded into a map, pointer and interface: %v %v %v, want nil", m, p, a)
	}
}

func TestResults(t *testing.T) {
	ok := OK([]string{"you", "me"})
	var words []string
	if ok.Err != nil || msgpack.Unmarshal(ok.Output, &words) != nil || !reflect.DeepEqual(words, []string{"you", "me"}) {
		t.Errorf("OK: %+v decodes to %v", ok, words)
	}
	if r := OK(make(chan int)); r.Err == nil || r.Output != nil {
		t.Errorf("OK of a value msgpack cannot encode = %+v, want an error", r)
	}
	if r := Failf("bad %s", "input"); r.Err == nil || r.Err.Error() != "bad input" {
		t.Errorf("Failf = %+v", r)
	}
	if r := Fail(nil); r.Err == nil {
		t.Error("Fail(nil) does not fail the item")
	}
	if got := (Config{Args: map[string]string{"k": ""}}).Arg("k", "def"); got != "" {
		t.Errorf("Arg of a key given empty = %q, want the empty value", got)
	}
	if got := (Config{}).Arg("k", "def"); got != "def" {
		t.Errorf("Arg of a missing key = %q, want the default", got)
	}
}

func TestToResponse(t *testing.T) {
	resp := toResponse([]Result{{Output: []byte{0xa1, 'x'}}, Failf("no"), Fail(errors.New(""))})
	if len(resp.Outputs) != 3 || string(resp.Outputs[0]) != "\xa1x" || resp.Error != "" {
		t.Errorf("outputs = %x, error %q; want three with the first set, and no batch error", resp.Outputs, resp.Error)
	}
	want := map[uint32]string{1: "no", 2: "the item failed, with an empty error"}
	if !reflect.DeepEqual(resp.ItemErrors, want) {
		t.Errorf("item errors = %v, want %v", resp.ItemErrors, want)
	}
}

// A result left empty is the plugin's bug: the batch fails, naming it,
// rather than its item being refused as though the caller sent a bad one.
func TestAnEmptyResultFailsTheBatch(t *testing.T) {
	resp := toResponse([]Result{{Output: []byte{0xa1, 'x'}}, {}})
	if want := "the plugin's Predict left result 1 of 2 empty"; !strings.Contains(resp.Error, want) || resp.Outputs != nil || resp.ItemErrors != nil {
		t.Errorf("response %+v; want only a batch error saying %q", resp, want)
	}
}

// TestPackageDocExample builds the plugin in the package documentation as it
// is written there, serves it through the real host and checks the answers
// the documentation promises.
func TestPackageDocExample(t *testing.T) {
	src := docExample(t)
	dir := t.TempDir()
	mainGo := filepath.Join(dir, "main.go")
	if err := os.WriteFile(mainGo, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// An overlay places the file in the module, where its imports resolve,
	// without writing into the source tree.
	pkgDir, err := filepath.Abs("internal/docexample")
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkgDir, "main.go"): mainGo}})
	if err != nil {
		t.Fatal(err)
	}
	overlayPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(overlayPath, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	binPath := filepath.Join(dir, "runecount")
	build := exec.Command("go", "build", "-overlay", overlayPath, "-o", binPath, "./internal/docexample")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the package doc example does not build: %v\n%s\n%s", err, out, src)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := plugin.Open(ctx, plugin.Config{Path: binPath})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := m.Describe(); !strings.HasPrefix(got, "plugin runecount on cpu") {
		t.Errorf("Describe() = %q", got)
	}
	items := make([][]byte, 2)
	for i, v := range []any{"héllo", 42} {
		if items[i], err = msgpack.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	outs, err := m.Predict(ctx, items)
	var itemErrs *model.ItemErrors
	if !errors.As(err, &itemErrs) || itemErrs.Errs[0] != nil || itemErrs.Errs[1] == nil {
		t.Fatalf("Predict error = %v, want item 1 (not a string) alone failed", err)
	}
	if !strings.Contains(itemErrs.Errs[1].Error(), "does not decode into *string") {
		t.Errorf("item 1's error %q does not say what was wrong", itemErrs.Errs[1])
	}
	var n int
	if err := msgpack.Unmarshal(outs[0], &n); err != nil || n != 5 {
		t.Errorf("runecount(héllo) = %v, %v; want 5", n, err)
	}
}

// docExample returns the Go program in the package documentation.
func docExample(t *testing.T) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "sdk.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	doc := f.Doc.Text()
	start := strings.Index(doc, "\tpackage main\n")
	if start < 0 {
		t.Fatal("no program in the package documentation")
	}
	var lines []string
	for _, line := range strings.Split(doc[start:], "\n") {
		if line != "" && !strings.HasPrefix(line, "\t") {
			break
		}
		lines = append(lines, strings.TrimPrefix(line, "\t"))
	}
	return strings.Join(lines, "\n")
}

func TestServeRefusesToRunByHand(t *testing.T) {
	if os.Getenv("SDK_TEST_SERVE") == "1" {
		Serve(nil)
		return
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestServeRefusesToRunByHand$")
	cmd.Env = append(os.Environ(), "SDK_TEST_SERVE=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("Serve without the cookie: %v, want exit status 1", err)
	}
	if !strings.Contains(string(out), "is a streamer model plugin") || !strings.Contains(string(out), "streamer serve --plugin") {
		t.Errorf("Serve without the cookie said %q, want how to serve it", out)
	}
}
