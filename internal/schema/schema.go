// Package schema implements the JSON-Schema subset that structured output
// enforces (docs/seam.md §9): Check tells whether a caller's outputSchema lies
// inside the subset and Validate checks a value against an accepted schema.
//
// It is hand-written rather than built on a general JSON Schema library: the
// subset is small, and the violation texts are part of the contract (clients
// and models read them), so they must not be a library's wording. The parser
// keeps object keys in document order, so violations come out in the order
// of the document.
package schema

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on what Check accepts. A schema is caller input and is walked
// recursively, so both its size and its depth are bounded.
const (
	// MaxBytes is the largest schema document accepted.
	MaxBytes = 64 << 10
	// MaxDepth is the deepest nesting of schema nodes accepted; the root is
	// at depth 1.
	MaxDepth = 32
	// maxNesting bounds raw JSON nesting (schema nodes, property maps and
	// annotation values together), of schemas and of values alike.
	maxNesting = 128
)

// ObjectRootViolation is the violation of a schema that lies in the subset
// but is not object-rooted.
const ObjectRootViolation = `schema.type must be "object" (structured output is object-rooted)`

// Violation is one way a schema leaves the subset. Path locates it (for
// example "schema.properties.a.minimum") and Text, which starts with Path,
// says what is wrong.
type Violation struct {
	Path string
	Text string
}

var (
	// constraintKeywords are the keywords the subset enforces.
	constraintKeywords = []string{"type", "oneOf", "properties", "required", "additionalProperties", "items", "enum", "const"}
	// annotationKeywords are accepted and ignored by validation.
	annotationKeywords = []string{"description", "title", "default", "examples"}
	// shapeKeywords need a type (and are not allowed beside oneOf).
	shapeKeywords = []string{"properties", "required", "additionalProperties", "items", "enum", "const"}
	// types are the accepted values of "type", in message order.
	types = []string{"object", "array", "string", "number", "integer", "boolean", "null"}
	// keywordTypes says on which types each shape keyword is allowed.
	keywordTypes = map[string][]string{
		"properties":           {"object"},
		"required":             {"object"},
		"additionalProperties": {"object"},
		"items":                {"array"},
		"enum":                 scalarTypes,
		"const":                scalarTypes,
	}
	scalarTypes = []string{"string", "number", "integer", "boolean", "null"}
)

// Check returns the texts of Violations(schema); empty means the schema is
// an accepted, object-rooted output schema.
func Check(schema json.RawMessage) []string {
	vs := Violations(schema)
	texts := make([]string, len(vs))
	for i, v := range vs {
		texts[i] = v.Text
	}
	return texts
}

// Violations checks the whole schema tree and returns every violation of
// the subset in document order. Only a schema with none is then held to the
// object-root rule (ObjectRootViolation), so a broken schema is not also
// reported as not object-rooted. Schemas larger than MaxBytes, or nested
// deeper than MaxDepth schema levels, are violations too.
func Violations(schema json.RawMessage) []Violation {
	root, vs := checkSubset(schema)
	if len(vs) == 0 && (root.kind != kindObject || !isString(root, "type", "object")) {
		vs = append(vs, Violation{Path: "schema.type", Text: ObjectRootViolation})
	}
	return vs
}

// isString reports whether object v has member k equal to the string s.
func isString(v *value, k, s string) bool {
	m, ok := v.field(k)
	return ok && m.kind == kindString && m.str == s
}

// checkSubset parses schema and collects its subset violations without the
// object-root rule. root is nil only when there are violations.
func checkSubset(schema json.RawMessage) (*value, []Violation) {
	c := &checker{}
	switch {
	case len(schema) > MaxBytes:
		c.add("schema", fmt.Sprintf("is larger than %d bytes", MaxBytes))
		return nil, c.vs
	case !utf8.Valid(schema):
		c.add("schema", "must be valid UTF-8")
		return nil, c.vs
	}
	root, err := parse(schema, maxNesting)
	if err == errTooDeep {
		c.add("schema", fmt.Sprintf("nests JSON deeper than %d levels", maxNesting))
		return nil, c.vs
	}
	if err != nil {
		c.add("schema", "must be valid JSON")
		return nil, c.vs
	}
	c.node(root, "schema", 1)
	return root, c.vs
}

// checker collects violations over one schema tree.
type checker struct{ vs []Violation }

func (c *checker) add(path, msg string) {
	c.vs = append(c.vs, Violation{Path: path, Text: path + " " + msg})
}

// node checks one schema node at depth and everything below it.
func (c *checker) node(n *value, path string, depth int) {
	if depth > MaxDepth {
		c.add(path, fmt.Sprintf("is nested deeper than %d schema levels", MaxDepth))
		return
	}
	if n.kind != kindObject {
		c.add(path, "must be a schema object")
		return
	}
	if n.dup != "" {
		c.add(path+"."+n.dup, "is declared more than once")
	}
	for i, k := range n.keys {
		switch {
		case slices.Contains(constraintKeywords, k):
		case slices.Contains(annotationKeywords, k):
			if !n.vals[i].lossless() {
				c.add(path+"."+k, "annotation must be lossless JSON data")
			}
		default:
			c.add(path+"."+k, "is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)")
		}
	}
	for _, k := range []string{"description", "title"} {
		if m, ok := n.field(k); ok && m.kind != kindString {
			c.add(path+"."+k, "must be a string")
		}
	}
	typ, hasType := n.field("type")
	oneOf, hasOneOf := n.field("oneOf")
	switch {
	case hasType && hasOneOf:
		c.add(path, "cannot declare both type and oneOf")
	case hasOneOf:
		c.oneOf(n, oneOf, path, depth)
	case !hasType:
		// Unconstrained JSON: no shape keywords.
		for _, k := range shapeKeywords {
			if n.has(k) {
				c.add(path+"."+k, "requires type or oneOf")
			}
		}
	case typ.kind == kindArray:
		c.add(path+".type", "must be a single type string (type arrays are not supported)")
	case typ.kind != kindString || !slices.Contains(types, typ.str):
		c.add(path+".type", "must be one of "+strings.Join(types, "/"))
	default:
		c.typed(n, typ.str, path, depth)
	}
}

// oneOf checks a oneOf node: at least two branch schemas and no shape
// keyword beside them.
func (c *checker) oneOf(n, oneOf *value, path string, depth int) {
	if oneOf.kind != kindArray || len(oneOf.arr) < 2 {
		c.add(path+".oneOf", "must be an array of at least two schemas")
	} else {
		for i, b := range oneOf.arr {
			c.node(b, fmt.Sprintf("%s.oneOf[%d]", path, i), depth+1)
		}
	}
	for _, k := range shapeKeywords {
		if n.has(k) {
			c.add(path+"."+k, "is not supported beside oneOf")
		}
	}
}

// typed checks a node with a valid type t.
func (c *checker) typed(n *value, t, path string, depth int) {
	for _, k := range shapeKeywords {
		if n.has(k) && !slices.Contains(keywordTypes[k], t) {
			c.add(path+"."+k, fmt.Sprintf("is not supported on type %q", t))
		}
	}
	switch t {
	case "object":
		c.object(n, path, depth)
	case "array":
		if items, ok := n.field("items"); ok {
			c.node(items, path+".items", depth+1)
		}
	default:
		c.scalar(n, t, path)
	}
}

// object checks properties (each a schema), then required and
// additionalProperties.
func (c *checker) object(n *value, path string, depth int) {
	props, hasProps := n.field("properties")
	if hasProps {
		if props.kind != kindObject {
			c.add(path+".properties", "must be an object of schemas")
		} else {
			if props.dup != "" {
				c.add(path+".properties."+props.dup, "is declared more than once")
			}
			for i, k := range props.keys {
				c.node(props.vals[i], path+".properties."+k, depth+1)
			}
		}
	}
	if req, ok := n.field("required"); ok {
		if req.kind != kindArray || slices.ContainsFunc(req.arr, func(e *value) bool { return e.kind != kindString }) {
			c.add(path+".required", "must be an array of strings")
		} else {
			for _, e := range req.arr {
				if !hasProps || props.kind != kindObject || !props.has(e.str) {
					c.add(path+".required", fmt.Sprintf("names %s which is not in properties", quote(e.str)))
				}
			}
		}
	}
	if ap, ok := n.field("additionalProperties"); ok && ap.kind != kindBool {
		c.add(path+".additionalProperties", "must be a boolean")
	}
}

// scalar checks enum and const of a scalar-typed node.
func (c *checker) scalar(n *value, t, path string) {
	enum, hasEnum := n.field("enum")
	enumValid := hasEnum && enum.kind == kindArray && len(enum.arr) > 0 &&
		!slices.ContainsFunc(enum.arr, func(e *value) bool { return !scalarMatches(t, e) })
	if hasEnum && !enumValid {
		c.add(path+".enum", fmt.Sprintf("must be a non-empty array of %s values", t))
	}
	cnst, hasConst := n.field("const")
	switch {
	case !hasConst:
	case !scalarMatches(t, cnst):
		c.add(path+".const", fmt.Sprintf("must be a %s value", t))
	case enumValid && !slices.ContainsFunc(enum.arr, cnst.equal):
		c.add(path+".const", fmt.Sprintf("must be one of %s.enum when both are declared", path))
	}
}

// scalarMatches reports whether v is a lossless value of scalar type t.
func scalarMatches(t string, v *value) bool {
	switch t {
	case "string":
		return v.kind == kindString
	case "number":
		return v.finiteNumber()
	case "integer":
		return isInteger(v)
	case "boolean":
		return v.kind == kindBool
	case "null":
		return v.kind == kindNull
	}
	return false
}

// isInteger reports whether v is a finite, integral number other than -0.
func isInteger(v *value) bool {
	if !v.finiteNumber() {
		return false
	}
	f, _ := v.float()
	return math.Trunc(f) == f
}
