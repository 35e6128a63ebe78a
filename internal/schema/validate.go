package schema

import (
	"encoding/json"
	"fmt"
)

// rootLabel names the whole value in violations: Validate checks the
// arguments of the structured_output tool call.
const rootLabel = "arguments"

// Validate checks value against schema and returns every violation,
// path-qualified and in walk order (empty means valid):
//
//	missing required property "a.b"
//	"x" must be a string
//	"k" is not a declared property (additionalProperties: false)
//	"v" must match exactly one oneOf branch (matched 2)
//
// Paths are dotted property names and [i] indexes; the value itself is
// called "arguments". The schema must lie in the subset (the object root is
// not required); when it does not, Validate returns the schema's own
// violations, since no value can be judged against it.
func Validate(schema, value json.RawMessage) []string {
	root, vs := checkSubset(schema)
	if len(vs) > 0 {
		texts := make([]string, len(vs))
		for i, v := range vs {
			texts[i] = v.Text
		}
		return texts
	}
	v, err := parse(value, maxNesting)
	switch {
	case err == errTooDeep:
		return []string{fmt.Sprintf("%q nests JSON deeper than %d levels", rootLabel, maxNesting)}
	case err != nil:
		return []string{fmt.Sprintf("%q must be valid JSON", rootLabel)}
	}
	return validate(root, v, "")
}

// label renders path for a message.
func label(path string) string {
	if path == "" {
		return quote(rootLabel)
	}
	return quote(path)
}

// propertyPath is the path of member key below path.
func propertyPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// validate checks v against the subset schema node n at path.
func validate(n, v *value, path string) []string {
	if oneOf, ok := n.field("oneOf"); ok {
		matched := 0
		for _, b := range oneOf.arr {
			if len(validate(b, v, path)) == 0 {
				matched++
			}
		}
		if matched != 1 {
			return []string{fmt.Sprintf("%s must match exactly one oneOf branch (matched %d)", label(path), matched)}
		}
		return nil
	}
	typ, ok := n.field("type")
	if !ok {
		if !v.lossless() {
			return []string{label(path) + " must be a lossless JSON value"}
		}
		return nil
	}
	switch typ.str {
	case "object":
		return validateObject(n, v, path)
	case "array":
		return validateArray(n, v, path)
	case "string":
		if v.kind != kindString {
			return []string{label(path) + " must be a string"}
		}
	case "number":
		if v.kind != kindNumber {
			return []string{label(path) + " must be a number"}
		}
		if !v.finiteNumber() {
			return []string{label(path) + " must be a finite JSON number"}
		}
	case "integer":
		if !isInteger(v) {
			return []string{label(path) + " must be an integer"}
		}
	case "boolean":
		if v.kind != kindBool {
			return []string{label(path) + " must be a boolean"}
		}
	case "null":
		if v.kind != kindNull {
			return []string{label(path) + " must be null"}
		}
	}
	return validateScalar(n, v, path)
}

// validateScalar checks enum and const once the type matched.
func validateScalar(n, v *value, path string) []string {
	if enum, ok := n.field("enum"); ok {
		in := false
		for _, e := range enum.arr {
			in = in || e.equal(v)
		}
		if !in {
			return []string{fmt.Sprintf("%s must be one of %s", label(path), enum)}
		}
	}
	if c, ok := n.field("const"); ok && !c.equal(v) {
		return []string{fmt.Sprintf("%s must be %s", label(path), c)}
	}
	return nil
}

// validateObject reports missing required members, then the members'
// own violations in declaration order, then undeclared members when
// additionalProperties is false.
func validateObject(n, v *value, path string) []string {
	if v.kind != kindObject {
		return []string{label(path) + " must be an object"}
	}
	var out []string
	if req, ok := n.field("required"); ok {
		for _, k := range req.arr {
			if !v.has(k.str) {
				out = append(out, fmt.Sprintf("missing required property %s", quote(propertyPath(path, k.str))))
			}
		}
	}
	props, hasProps := n.field("properties")
	if hasProps {
		for i, k := range props.keys {
			if m, ok := v.field(k); ok {
				out = append(out, validate(props.vals[i], m, propertyPath(path, k))...)
			}
		}
	}
	if ap, ok := n.field("additionalProperties"); ok && !ap.b {
		for _, k := range v.keys {
			if !hasProps || !props.has(k) {
				out = append(out, fmt.Sprintf("%s is not a declared property (additionalProperties: false)", quote(propertyPath(path, k))))
			}
		}
	}
	if len(out) == 0 && !v.lossless() {
		return []string{label(path) + " must be a lossless JSON object"}
	}
	return out
}

// validateArray checks every element against items.
func validateArray(n, v *value, path string) []string {
	if v.kind != kindArray {
		return []string{label(path) + " must be an array"}
	}
	var out []string
	if items, ok := n.field("items"); ok {
		for i, e := range v.arr {
			out = append(out, validate(items, e, fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	if len(out) == 0 && !v.lossless() {
		return []string{label(path) + " must be a dense lossless JSON array"}
	}
	return out
}
