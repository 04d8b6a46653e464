package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var updateLayout = flag.Bool("update-layout", false, "record the fingerprint of the entries' layout in testdata/layout.txt")

const layoutFile = "testdata/layout.txt"

// TestTheLayoutIsNumbered keeps a fingerprint of what front ends and nodes
// keep in Redis, part by part: the scripts, the keys, the fields of items
// and answers, the wire's error codes, how answers are packed and how a
// header reads. When a part changes, it fails, naming it, until the new
// fingerprint is recorded (-update-layout): whoever changes the layout so
// that a front end or node of the last one would misread it raises
// entryLayout, which keeps those of another version out (see ModelID).
func TestTheLayoutIsNumbered(t *testing.T) {
	parts, err := layoutParts()
	if err != nil {
		t.Fatal(err)
	}
	if *updateLayout {
		var b strings.Builder
		b.WriteString("# The layout of what front ends and nodes keep in Redis, and a\n")
		b.WriteString("# fingerprint of each of its parts (see TestTheLayoutIsNumbered).\n")
		fmt.Fprintf(&b, "layout %s\n", entryLayout)
		for _, name := range slices.Sorted(maps.Keys(parts)) {
			fmt.Fprintf(&b, "%s %s\n", name, parts[name])
		}
		if err := os.WriteFile(layoutFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(layoutFile)
	if err != nil {
		t.Fatalf("%v: record the layout with go test ./broker -run TestTheLayoutIsNumbered -update-layout", err)
	}
	recorded, layout := map[string]string{}, ""
	for line := range strings.Lines(string(data)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("%s: a line without a fingerprint: %q", layoutFile, line)
		}
		if name, value := line[:i], line[i+1:]; name == "layout" {
			layout = value
		} else {
			recorded[name] = value
		}
	}
	var changed []string
	for name, fp := range parts {
		if recorded[name] != fp {
			changed = append(changed, name)
		}
	}
	for name := range recorded {
		if _, ok := parts[name]; !ok {
			changed = append(changed, name+" (gone)")
		}
	}
	slices.Sort(changed)
	if len(changed) > 0 {
		t.Errorf("what front ends and nodes keep in Redis changed since layout %s was recorded: %s. If a front end or node of layout %s would misread it, raise entryLayout (model.go); either way, record the new fingerprint: go test ./broker -run TestTheLayoutIsNumbered -update-layout",
			layout, strings.Join(changed, ", "), layout)
	}
	if layout != entryLayout {
		t.Errorf("%s records layout %q, and entryLayout is %q: record the new layout with go test ./broker -run TestTheLayoutIsNumbered -update-layout", layoutFile, layout, entryLayout)
	}
}

// layoutParts fingerprints the parts of the layout: each script of the
// package's sources, found by its call of redis.NewScript, and what the
// code says of keys, fields, codes, packed answers and headers.
func layoutParts() (map[string]string, error) {
	fp := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:8])
	}
	parts := map[string]string{}
	files, err := filepath.Glob("*.go")
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var consts []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gen.Specs {
				vs, ok := spec.(*ast.ValueSpec)
				if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 {
					continue
				}
				id := vs.Names[0].Name
				if gen.Tok == token.CONST && (strings.HasPrefix(id, "field") || strings.HasPrefix(id, "record")) {
					if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
						consts = append(consts, id+"="+lit.Value)
					}
					continue
				}
				call, ok := vs.Values[0].(*ast.CallExpr)
				if !ok || len(call.Args) != 1 {
					continue
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); !ok || sel.Sel.Name != "NewScript" {
					continue
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok {
					return nil, fmt.Errorf("%s: the script %s is not a literal", fset.Position(call.Pos()), id)
				}
				src, err := strconv.Unquote(lit.Value)
				if err != nil {
					return nil, err
				}
				parts["script "+id] = fp(src)
			}
		}
	}
	if len(parts) == 0 || len(consts) == 0 {
		return nil, fmt.Errorf("found %d scripts and %d fields in %s", len(parts), len(consts), files)
	}
	slices.Sort(consts)
	parts["fields"] = fp(strings.Join(consts, " "))
	k := newKeys("P")
	parts["keys"] = fp(fmt.Sprintf("%+v %s", k, k.nodeItems("N")))
	parts["model"] = fp(strings.Join(modelFields, " "))
	var codeNames []string
	for _, c := range codes {
		codeNames = append(codeNames, c.code)
	}
	parts["codes"] = fp(strings.Join(codeNames, " "))
	packed := appendAnswer(nil, &answerEntry{seq: "7", index: "3", output: []byte("out")})
	packed = appendAnswer(packed, &answerEntry{seq: "7", index: "4", err: fmt.Errorf("no: %w", codes[0].err)})
	parts["answers"] = fp(fmt.Sprintf("%x %d", packed, answerChunk))
	hd, ok := parseHeader("F 7 3 1700000000000000 5000")
	parts["header"] = fp(fmt.Sprintf("%+v %v %s", hd, ok, 5000*time.Millisecond))
	return parts, nil
}
