package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"testing"
)

// TestBounded_WrapsEveryMethod: bounded embeds Store, so a method added to
// the interface would compile unbounded; every method that takes a context
// must be declared on *bounded itself.
func TestBounded_WrapsEveryMethod(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "bounded.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil {
			declared[fn.Name.Name] = true
		}
	}
	st := reflect.TypeFor[Store]()
	ctx := reflect.TypeFor[interface{ Done() <-chan struct{} }]()
	for i := range st.NumMethod() {
		m := st.Method(i)
		if m.Type.NumIn() == 0 || !m.Type.In(0).Implements(ctx) {
			continue
		}
		if !declared[m.Name] {
			t.Errorf("Store.%s takes a context but *bounded does not bound it (add it to bounded.go)", m.Name)
		}
	}
}
