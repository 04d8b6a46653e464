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

var (
	updateLayout     = flag.Bool("update-layout", false, "record the fingerprint of the entries' layout in testdata/layout.txt")
	layoutCompatible = flag.Bool("layout-compatible", false, "with -update-layout: the layout changed in a way that front ends and nodes of the recorded one read alike, so its number stays")
)

const layoutFile = "testdata/layout.txt"

// TestTheLayoutIsNumbered keeps a fingerprint of what front ends and nodes
// keep in Redis, part by part: the scripts, the keys, the fields of items
// and answers, the wire's error codes, how answers are packed and how a
// header reads. When a part changes under the same entryLayout, it fails,
// naming the part: whoever changed it raises entryLayout, which keeps
// front ends and nodes of another version out (see ModelID), or, for a
// change that those of the recorded layout read alike, says so
// (-update-layout -layout-compatible). The model key, by which versions
// tell each other apart, may never change.
func TestTheLayoutIsNumbered(t *testing.T) {
	if k := newKeys("P"); k.model != "P:model" || !slices.Equal(modelFields, []string{"wire", "name", "label"}) || layoutMark != " @layout " {
		t.Fatalf("the model key %q, its fields %q and the layout's mark %q changed: every version reads them to tell another from itself, so they stay as they are", k.model, modelFields, layoutMark)
	}
	parts, err := layoutParts()
	if err != nil {
		t.Fatal(err)
	}
	recorded, layout := readLayout(t)
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
	same := layout == entryLayout
	if *updateLayout && (len(changed) == 0 || !same || *layoutCompatible) {
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
	switch {
	case len(changed) > 0 && same:
		t.Errorf("what front ends and nodes keep in Redis changed under layout %s: %s. Raise entryLayout (model.go) and record the new layout (go test ./broker -run TestTheLayoutIsNumbered -update-layout); or, if front ends and nodes of layout %s read the change alike, record it under the same number (-update-layout -layout-compatible)",
			layout, strings.Join(changed, ", "), layout)
	case !same:
		t.Errorf("%s records layout %q, and entryLayout is %q: record the new layout with go test ./broker -run TestTheLayoutIsNumbered -update-layout", layoutFile, layout, entryLayout)
	}
}

// readLayout reads the fingerprints recorded, by part, and the layout's
// number.
func readLayout(t *testing.T) (recorded map[string]string, layout string) {
	data, err := os.ReadFile(layoutFile)
	if err != nil {
		t.Fatalf("%v: record the layout with go test ./broker -run TestTheLayoutIsNumbered -update-layout", err)
	}
	recorded = map[string]string{}
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
	return recorded, layout
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
	var asts []*ast.File
	scripts := map[string]bool{} // the variables made by redis.NewScript
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		asts = append(asts, f)
		for _, decl := range f.Decls {
			if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.VAR {
				for _, spec := range gen.Specs {
					if vs := spec.(*ast.ValueSpec); len(vs.Names) == 1 && len(vs.Values) == 1 {
						if call, ok := vs.Values[0].(*ast.CallExpr); ok {
							if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "NewScript" {
								scripts[vs.Names[0].Name] = true
							}
						}
					}
				}
			}
		}
	}
	var consts []string
	for _, f := range asts {
		// Every script, wherever made, is named by the variable it is
		// the one value of.
		named := map[*ast.CallExpr]string{}
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
				if lit, ok := vs.Values[0].(*ast.BasicLit); ok && gen.Tok == token.CONST &&
					(strings.HasPrefix(id, "field") || strings.HasPrefix(id, "record") || id == "nodeGroup" || id == "layoutMark") {
					consts = append(consts, id+"="+lit.Value)
				}
				if call, ok := vs.Values[0].(*ast.CallExpr); ok {
					named[call] = id
				}
			}
		}
		var bad error
		ast.Inspect(f, func(node ast.Node) bool {
			call, ok := node.(*ast.CallExpr)
			if !ok || bad != nil {
				return bad == nil
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if sel.Sel.Name == "Eval" || sel.Sel.Name == "EvalRO" {
				// A script's own Eval, or one of a script this test
				// does not see.
				if x, ok := sel.X.(*ast.Ident); !ok || !scripts[x.Name] {
					bad = fmt.Errorf("%s: a script this test cannot fingerprint: make each with redis.NewScript of a literal, the one value of a package-level variable", fset.Position(call.Pos()))
				}
				return bad == nil
			}
			if sel.Sel.Name != "NewScript" {
				return true
			}
			id, ok := named[call]
			var lit *ast.BasicLit
			if len(call.Args) == 1 {
				lit, _ = call.Args[0].(*ast.BasicLit)
			}
			if !ok || lit == nil {
				bad = fmt.Errorf("%s: a script this test cannot fingerprint: make each with redis.NewScript of a literal, the one value of a package-level variable", fset.Position(call.Pos()))
				return false
			}
			src, err := strconv.Unquote(lit.Value)
			if err != nil {
				bad = err
				return false
			}
			parts["script "+id] = fp(src)
			return true
		})
		if bad != nil {
			return nil, bad
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
		codeNames = append(codeNames, c.code+"="+c.err.Error())
	}
	parts["codes"] = fp(strings.Join(codeNames, " "))
	parts["poison"] = fp(poisonHash("key", []byte("item")))
	parts["model wire"] = fp(layoutWire("w"))
	packed := appendAnswer(nil, &answerEntry{seq: "7", index: "3", output: []byte("out")})
	packed = appendAnswer(packed, &answerEntry{seq: "7", index: "4", err: fmt.Errorf("no: %w", codes[0].err)})
	parts["answers"] = fp(fmt.Sprintf("%x %d", packed, answerChunk))
	hd, ok := parseHeader("F 7 3 1700000000000000 5000")
	parts["header"] = fp(fmt.Sprintf("%+v %v %s", hd, ok, 5000*time.Millisecond))
	return parts, nil
}
