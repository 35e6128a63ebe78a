package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// codeCiteRE matches a page's citation of code: a Go file by its path from
// the repository's root, optionally with the function or method it names
// (`internal/children/followup.go:Manager.Followup`).
var codeCiteRE = regexp.MustCompile("`((?:internal|cmd|web|api|bench)/[A-Za-z0-9_./-]+\\.go)(?::([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?)?`")

// TestCodeCitesResolve: every Go file the pages name exists, and every
// function or method a page names beside its file is declared there, so
// that a page cannot keep pointing at code that moved.
func TestCodeCitesResolve(t *testing.T) {
	pages := []string{"architecture.md", "seam.md", "README.md", "../README.md"}
	cited := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range codeCiteRE.FindAllStringSubmatch(string(raw), -1) {
			cited++
			file, name, method := filepath.Join("..", m[1]), m[2], m[3]
			if name == "" {
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s names %s, which does not exist", page, m[1])
				}
				continue
			}
			if !declares(t, file, name, method) {
				t.Errorf("%s names %s:%s, which that file does not declare", page, m[1], m[0][len(m[1])+2:len(m[0])-1])
			}
		}
	}
	if cited == 0 {
		t.Fatal("no page cites code: the pattern no longer matches the pages")
	}
}

// declares reports whether Go file path declares function name, or, with
// method set, method of type name.
func declares(t *testing.T, path, name, method string) bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("parse %s: %v", path, err)
		return true
	}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		if method == "" && fn.Recv == nil && fn.Name.Name == name {
			return true
		}
		if method != "" && fn.Recv != nil && fn.Name.Name == method && recvName(fn.Recv.List[0].Type) == name {
			return true
		}
	}
	return false
}

// recvName is the type name of a receiver: T, *T, T[P] or *T[P].
func recvName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return recvName(x.X)
	case *ast.IndexExpr:
		return recvName(x.X)
	case *ast.IndexListExpr:
		return recvName(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}
