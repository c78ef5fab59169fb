// Command filerefs counts, for one package, the references from its other
// non-test files to the identifiers one of its files declares (types,
// functions, methods, struct fields, constants, variables): how much of
// the package reaches back into that file.
//
//	go run ./internal/filerefs -pkg ./region -file txn.go
//
// It type-checks the package from source against its dependencies' export
// data (go list -export), so a method or field is counted where it is
// declared, whatever the receiver's variable is called. With -v it lists
// each referencing file and each identifier referenced.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
)

func main() {
	pkg := flag.String("pkg", "./region", "the package, as go list names it")
	file := flag.String("file", "txn.go", "the file of the package whose declarations are counted")
	verbose := flag.Bool("v", false, "list the references by file and by identifier")
	flag.Parse()
	if err := run(os.Stdout, *pkg, *file, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "filerefs:", err)
		os.Exit(1)
	}
}

type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
}

func run(w io.Writer, pkg, file string, verbose bool) error {
	// Export data of every dependency, and the package's own files.
	out, err := exec.Command("go", "list", "-export", "-deps", "-json", pkg).Output()
	if err != nil {
		return fmt.Errorf("go list %s: %w", pkg, err)
	}
	exports := map[string]string{}
	var target listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			return fmt.Errorf("go list output: %w", err)
		}
		exports[p.ImportPath] = p.Export
		target = p // -deps lists the package itself last
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, name := range target.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(target.Dir, name), nil, 0)
		if err != nil {
			return err
		}
		files = append(files, f)
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if e := exports[path]; e != "" {
			return os.Open(e)
		}
		return nil, fmt.Errorf("no export data for %s", path)
	})
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{Importer: imp}
	if _, err := conf.Check(target.ImportPath, fset, files, info); err != nil {
		return fmt.Errorf("type-check %s: %w", target.ImportPath, err)
	}
	byFile := map[string]int{}
	byIdent := map[string]int{}
	total, refs := 0, 0
	for id, obj := range info.Uses {
		if obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != target.ImportPath {
			continue
		}
		from := filepath.Base(fset.Position(id.Pos()).Filename)
		declared := filepath.Base(fset.Position(obj.Pos()).Filename)
		if from == declared {
			continue
		}
		total++
		if declared != file {
			continue
		}
		refs++
		byFile[from]++
		byIdent[obj.Name()]++
	}
	fmt.Fprintf(w, "%s: %d of %d references between its files (%.0f%%) name an identifier declared in %s, from %d files\n",
		target.ImportPath, refs, total, 100*float64(refs)/float64(max(total, 1)), file, len(byFile))
	if verbose {
		list := func(title string, m map[string]int) {
			fmt.Fprintln(w, title)
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
			for _, k := range keys {
				fmt.Fprintf(w, "  %5d  %s\n", m[k], k)
			}
		}
		list("by referencing file:", byFile)
		list("by identifier:", byIdent)
	}
	return nil
}
