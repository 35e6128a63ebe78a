package web

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

// TestBundle_HoldsEveryModuleOnceImportsFirst: dashboard.js holds each
// module of static/ once, after the modules it imports, and no import or
// export is left in it.
func TestBundle_HoldsEveryModuleOnceImportsFirst(t *testing.T) {
	b, err := fs.ReadFile(FS, "dashboard.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	at := map[string]int{}
	mods, err := fs.Glob(FS, "*.js")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		if m == "dashboard.js" {
			continue
		}
		head := "// " + m + "\nconst " + moduleVar(m) + " = "
		if n := strings.Count(src, head); n != 1 {
			t.Fatalf("%s is in dashboard.js %d times, want once (every module is part of the page)", m, n)
		}
		at[m] = strings.Index(src, head)
	}
	for _, m := range mods {
		if m == "dashboard.js" {
			continue
		}
		code, err := fs.ReadFile(FS, m)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range importLine.FindAllSubmatch(code, -1) {
			if dep := string(imp[2]); at[dep] > at[m] {
				t.Errorf("%s comes before %s, which it imports", m, dep)
			}
		}
	}
	// boot.js is app.js's first import: it runs before app.js's other
	// imports that it does not import itself.
	if at["boot.js"] > at["approvals.js"] {
		t.Errorf("boot.js comes after approvals.js; it is to run first")
	}
	if loc := otherSyntax.FindStringIndex(src); loc != nil {
		t.Errorf("dashboard.js still has an import or export: %.60q", src[loc[0]:])
	}
}

// TestBundle_RefusesWhatItDoesNotKnow: a form of import or export other
// than the ones bundle rewrites, a renamed import and a cycle are errors,
// not a script that fails in the browser.
func TestBundle_RefusesWhatItDoesNotKnow(t *testing.T) {
	for name, files := range map[string]fstest.MapFS{
		"default export": {"app.js": {Data: []byte("export default 1;\n")}},
		"export list":    {"app.js": {Data: []byte("const a = 1;\nexport { a };\n")}},
		"default import": {"app.js": {Data: []byte("import a from './a.js';\n")}, "a.js": {Data: []byte("export const a = 1;\n")}},
		"renamed import": {"app.js": {Data: []byte("import { a as b } from './a.js';\n")}, "a.js": {Data: []byte("export const a = 1;\n")}},
		"cycle": {"app.js": {Data: []byte("import { a } from './a.js';\nexport const b = 1;\n")},
			"a.js": {Data: []byte("import { b } from './app.js';\nexport const a = 1;\n")}},
		"missing module": {"app.js": {Data: []byte("import { a } from './a.js';\n")}},
	} {
		if _, err := bundle(files, "app.js"); err == nil {
			t.Errorf("%s: bundled without an error", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestBundle_WritesModulesAsFunctions: a module's imports become reads of
// the exports of the modules before it, and its exports the value its
// function returns.
func TestBundle_WritesModulesAsFunctions(t *testing.T) {
	got, err := bundle(fstest.MapFS{
		"app.js":   {Data: []byte("import { a, f } from './a.js';\nimport { C } from './b-c.js';\nnew C(f(a));\n")},
		"a.js":     {Data: []byte("export const a = 1;\nexport async function f(x) { return x; }\n")},
		"b-c.js":   {Data: []byte("import { a } from './a.js';\nexport class C { constructor() { this.a = a; } }\n")},
		"other.js": {Data: []byte("export const unused = 1;\n")},
	}, "app.js")
	if err != nil {
		t.Fatal(err)
	}
	want := `// a.js
const module_a = (() => {
const a = 1;
async function f(x) { return x; }

return { a, f };
})();

// b-c.js
const module_b_c = (() => {
const { a } = module_a;
class C { constructor() { this.a = a; } }

return { C };
})();

// app.js
const module_app = (() => {
const { a, f } = module_a;
const { C } = module_b_c;
new C(f(a));

return {  };
})();

`
	if string(got) != want {
		t.Errorf("bundle:\n%s\nwant:\n%s", got, want)
	}
}

// TestBundle_IsServedLikeAFile: dashboard.js opens, stats and seeks like an
// embedded file, which is what the server's file serving needs.
func TestBundle_IsServedLikeAFile(t *testing.T) {
	want, err := fs.ReadFile(FS, "dashboard.js")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := fs.Stat(FS, "dashboard.js"); err != nil || info.Size() != int64(len(want)) || info.IsDir() {
		t.Fatalf("stat dashboard.js: %v, %v", info, err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/dashboard.js", nil)
	req.Header.Set("Range", "bytes=0-9")
	http.ServeFileFS(rec, req, FS, "dashboard.js")
	if rec.Code != http.StatusPartialContent || rec.Body.String() != string(want[:10]) || !strings.Contains(rec.Header().Get("Content-Type"), "javascript") {
		t.Fatalf("GET dashboard.js bytes 0-9: %d %q %q", rec.Code, rec.Body.String(), rec.Header().Get("Content-Type"))
	}
}
