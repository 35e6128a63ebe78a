package web

import (
	"bytes"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"time"
)

// The module syntax bundle understands. The dashboard's modules keep to it:
// an import is one line `import { a, b } from './x.js';`, an export is a
// declaration `export function|async function|class|const name`, both at
// the start of a line.
var (
	importLine = regexp.MustCompile(`(?m)^import \{([^}]*)\} from '\./([A-Za-z0-9_-]+\.js)';$`)
	exportDecl = regexp.MustCompile(`(?m)^export ((?:async )?function |class |const )([A-Za-z_$][A-Za-z0-9_$]*)`)
	// Any other import or export at the start of a line.
	otherSyntax = regexp.MustCompile(`(?m)^(?:import|export)[\s{*]`)
)

// bundle joins entry and every module it imports, directly or not, into one
// script, so that the page fetches and compiles one file rather than one per
// module. Each module becomes a function that returns its exports, called in
// the order the browser would evaluate the module graph (a module's imports
// first, in the order it lists them), so each runs once and as before.
func bundle(fsys fs.FS, entry string) ([]byte, error) {
	b := &bundler{fsys: fsys, done: map[string]bool{}, open: map[string]bool{}}
	if err := b.add(entry); err != nil {
		return nil, err
	}
	return b.out.Bytes(), nil
}

type bundler struct {
	fsys fs.FS
	done map[string]bool // modules written out
	open map[string]bool // modules whose imports are being written: a cycle
	out  bytes.Buffer
}

func (b *bundler) add(name string) error {
	if b.done[name] {
		return nil
	}
	if b.open[name] {
		return fmt.Errorf("bundling %s: it imports itself through a cycle", name)
	}
	b.open[name] = true
	src, err := fs.ReadFile(b.fsys, name)
	if err != nil {
		return fmt.Errorf("bundling %s: %w", name, err)
	}
	var deps []string
	var bad error
	body := importLine.ReplaceAllFunc(src, func(m []byte) []byte {
		sub := importLine.FindSubmatch(m)
		if bytes.Contains(sub[1], []byte(" as ")) {
			bad = fmt.Errorf("bundling %s: %q renames an import", name, m)
		}
		deps = append(deps, string(sub[2]))
		return []byte("const {" + string(sub[1]) + "} = " + moduleVar(string(sub[2])) + ";")
	})
	var exports []string
	body = exportDecl.ReplaceAllFunc(body, func(m []byte) []byte {
		exports = append(exports, string(exportDecl.FindSubmatch(m)[2]))
		return m[len("export "):]
	})
	if loc := otherSyntax.FindIndex(body); loc != nil && bad == nil {
		line, _, _ := bytes.Cut(body[loc[0]:], []byte("\n"))
		bad = fmt.Errorf("bundling %s: %q is an import or export bundle does not know", name, line)
	}
	if bad != nil {
		return bad
	}
	for _, d := range deps {
		if err := b.add(d); err != nil {
			return err
		}
	}
	fmt.Fprintf(&b.out, "// %s\nconst %s = (() => {\n%s\nreturn { %s };\n})();\n\n", name, moduleVar(name), body, strings.Join(exports, ", "))
	delete(b.open, name)
	b.done[name] = true
	return nil
}

// moduleVar names the variable that holds a module's exports in the bundle.
func moduleVar(name string) string {
	return "module_" + strings.ReplaceAll(strings.TrimSuffix(name, ".js"), "-", "_")
}

// withFile is fsys with one more file, name at its root, holding data.
type withFile struct {
	fs.FS
	name string
	data []byte
}

func (w withFile) Open(name string) (fs.File, error) {
	if name != w.name {
		return w.FS.Open(name)
	}
	return memFile{bytes.NewReader(w.data), memInfo{name: w.name, size: int64(len(w.data))}}, nil
}

// memFile is an open withFile file; bytes.Reader gives it the Seek that
// http.ServeFileFS needs.
type memFile struct {
	*bytes.Reader
	info memInfo
}

func (f memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (memFile) Close() error                 { return nil }

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string     { return i.name }
func (i memInfo) Size() int64      { return i.size }
func (memInfo) Mode() fs.FileMode  { return 0o444 }
func (memInfo) ModTime() time.Time { return time.Time{} }
func (memInfo) IsDir() bool        { return false }
func (memInfo) Sys() any           { return nil }
