package schema

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// nested returns an object schema whose property "p" is nested levels deep
// (the root counts as level 1).
func nested(levels int) string {
	s := `{"type":"string"}`
	for range levels - 1 {
		s = `{"type":"object","properties":{"p":` + s + `}}`
	}
	return s
}

func TestCheck(t *testing.T) {
	t.Parallel()
	const keywordMsg = " is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)"
	tests := []struct {
		name   string
		schema string
		want   []string
	}{
		// Accepted schemas.
		{"minimal object", `{"type":"object"}`, nil},
		{"every constraint keyword", `{"type":"object","properties":{"s":{"type":"string","enum":["a","b"],"const":"a"},"a":{"type":"array","items":{"type":"integer"}},"o":{"oneOf":[{"type":"null"},{"type":"boolean"}]}},"required":["s"],"additionalProperties":false}`, nil},
		{"annotations are ignored", `{"type":"object","description":"d","title":"t","default":{"a":[1,null]},"examples":[{"x":1}]}`, nil},
		{"unconstrained property with annotations only", `{"type":"object","properties":{"any":{"description":"anything"}}}`, nil},
		{"additionalProperties true is open", `{"type":"object","additionalProperties":true}`, nil},
		{"integral number for integer", `{"type":"object","properties":{"n":{"type":"integer","enum":[1,2.0,3e2]}}}`, nil},
		{"numeric const in enum compares by value", `{"type":"object","properties":{"n":{"type":"number","enum":[1,2.5],"const":1.0}}}`, nil},
		{"depth 32 accepted", nested(MaxDepth), nil},

		// Annotation keywords.
		{"description must be a string", `{"type":"object","description":1}`, []string{"schema.description must be a string"}},
		{"title must be a string", `{"type":"object","title":null}`, []string{"schema.title must be a string"}},
		{"default must be lossless", `{"type":"object","default":-0}`, []string{"schema.default annotation must be lossless JSON data"}},
		{"examples must be lossless", `{"type":"object","examples":[1e400]}`, []string{"schema.examples annotation must be lossless JSON data"}},

		// Unsupported keywords, all collected.
		{"unsupported keywords", `{"type":"object","$ref":"#","anyOf":[],"allOf":[],"properties":{"n":{"type":"number","minimum":0},"s":{"type":"string","pattern":"x","format":"date"},"a":{"type":"array","minItems":1}}}`, []string{
			"schema.$ref" + keywordMsg,
			"schema.anyOf" + keywordMsg,
			"schema.allOf" + keywordMsg,
			"schema.properties.n.minimum" + keywordMsg,
			"schema.properties.s.pattern" + keywordMsg,
			"schema.properties.s.format" + keywordMsg,
			"schema.properties.a.minItems" + keywordMsg,
		}},

		// Nodes must be schema objects.
		{"root array", `[]`, []string{"schema must be a schema object"}},
		{"root null", `null`, []string{"schema must be a schema object"}},
		{"property not an object", `{"type":"object","properties":{"a":true}}`, []string{"schema.properties.a must be a schema object"}},
		{"duplicate keyword", `{"type":"object","type":"object"}`, []string{"schema.type is declared more than once"}},
		{"duplicate property", `{"type":"object","properties":{"a":{},"a":{}}}`, []string{"schema.properties.a is declared more than once"}},

		// type and oneOf.
		{"type and oneOf together", `{"type":"object","oneOf":[{"type":"object"},{"type":"null"}]}`, []string{"schema cannot declare both type and oneOf"}},
		{"unconstrained node with shape keywords", `{"type":"object","properties":{"a":{"properties":{},"required":[],"additionalProperties":true,"items":{},"enum":[1],"const":1}}}`, []string{
			"schema.properties.a.properties requires type or oneOf",
			"schema.properties.a.required requires type or oneOf",
			"schema.properties.a.additionalProperties requires type or oneOf",
			"schema.properties.a.items requires type or oneOf",
			"schema.properties.a.enum requires type or oneOf",
			"schema.properties.a.const requires type or oneOf",
		}},
		{"type array", `{"type":["object","null"]}`, []string{"schema.type must be a single type string (type arrays are not supported)"}},
		{"unknown type", `{"type":"wat"}`, []string{"schema.type must be one of object/array/string/number/integer/boolean/null"}},
		{"type not a string", `{"type":1}`, []string{"schema.type must be one of object/array/string/number/integer/boolean/null"}},

		// oneOf.
		{"oneOf with one branch", `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"}]}}}`, []string{"schema.properties.a.oneOf must be an array of at least two schemas"}},
		{"oneOf not an array", `{"type":"object","properties":{"a":{"oneOf":{}}}}`, []string{"schema.properties.a.oneOf must be an array of at least two schemas"}},
		{"oneOf branches are checked", `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"x"}]}}}`, []string{"schema.properties.a.oneOf[1].type must be one of object/array/string/number/integer/boolean/null"}},
		{"shape keywords beside oneOf", `{"type":"object","properties":{"a":{"oneOf":[{"type":"string"},{"type":"null"}],"enum":["x"],"items":{}}}}`, []string{
			"schema.properties.a.items is not supported beside oneOf",
			"schema.properties.a.enum is not supported beside oneOf",
		}},

		// Object keywords.
		{"object keywords on a string", `{"type":"object","properties":{"a":{"type":"string","properties":{},"required":[],"additionalProperties":false}}}`, []string{
			`schema.properties.a.properties is not supported on type "string"`,
			`schema.properties.a.required is not supported on type "string"`,
			`schema.properties.a.additionalProperties is not supported on type "string"`,
		}},
		{"properties not an object", `{"type":"object","properties":[]}`, []string{"schema.properties must be an object of schemas"}},
		{"required not strings", `{"type":"object","properties":{"a":{}},"required":["a",1]}`, []string{"schema.required must be an array of strings"}},
		{"required not an array", `{"type":"object","required":"a"}`, []string{"schema.required must be an array of strings"}},
		{"required names undeclared", `{"type":"object","properties":{"a":{}},"required":["a","b"]}`, []string{`schema.required names "b" which is not in properties`}},
		{"required without properties", `{"type":"object","required":["a"]}`, []string{`schema.required names "a" which is not in properties`}},
		{"additionalProperties must be boolean", `{"type":"object","additionalProperties":{}}`, []string{"schema.additionalProperties must be a boolean"}},

		// items.
		{"items on an object", `{"type":"object","items":{}}`, []string{`schema.items is not supported on type "object"`}},
		{"items is checked", `{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","minLength":1}}}}`, []string{"schema.properties.a.items.minLength" + keywordMsg}},
		{"items must be a schema", `{"type":"object","properties":{"a":{"type":"array","items":[{}]}}}`, []string{"schema.properties.a.items must be a schema object"}},

		// enum and const.
		{"enum on an array", `{"type":"object","properties":{"a":{"type":"array","enum":[[]]}}}`, []string{`schema.properties.a.enum is not supported on type "array"`}},
		{"const on an object", `{"type":"object","const":{}}`, []string{`schema.const is not supported on type "object"`}},
		{"empty enum", `{"type":"object","properties":{"a":{"type":"string","enum":[]}}}`, []string{"schema.properties.a.enum must be a non-empty array of string values"}},
		{"enum of the wrong type", `{"type":"object","properties":{"a":{"type":"string","enum":["x",1]}}}`, []string{"schema.properties.a.enum must be a non-empty array of string values"}},
		{"const of the wrong type", `{"type":"object","properties":{"a":{"type":"boolean","const":"true"}}}`, []string{"schema.properties.a.const must be a boolean value"}},
		{"const outside enum", `{"type":"object","properties":{"a":{"type":"string","enum":["x"],"const":"y"}}}`, []string{"schema.properties.a.const must be one of schema.properties.a.enum when both are declared"}},
		{"null enum and const", `{"type":"object","properties":{"a":{"type":"null","enum":[null],"const":null}}}`, nil},

		// Numbers.
		{"non-finite number in enum", `{"type":"object","properties":{"a":{"type":"number","enum":[1e400]}}}`, []string{"schema.properties.a.enum must be a non-empty array of number values"}},
		{"negative zero const", `{"type":"object","properties":{"a":{"type":"number","const":-0}}}`, []string{"schema.properties.a.const must be a number value"}},
		{"fraction for integer", `{"type":"object","properties":{"a":{"type":"integer","const":1.5}}}`, []string{"schema.properties.a.const must be a integer value"}},

		// Object root, only once the tree is clean.
		{"string root", `{"type":"string"}`, []string{ObjectRootViolation}},
		{"array root", `{"type":"array"}`, []string{ObjectRootViolation}},
		{"oneOf root", `{"oneOf":[{"type":"object"},{"type":"null"}]}`, []string{ObjectRootViolation}},
		{"unconstrained root", `{}`, []string{ObjectRootViolation}},
		{"broken root is not also object-root", `{"type":"wat"}`, []string{"schema.type must be one of object/array/string/number/integer/boolean/null"}},

		// Bounds.
		{"depth 33 rejected", nested(MaxDepth + 1), []string{"schema" + strings.Repeat(".properties.p", MaxDepth) + " is nested deeper than 32 schema levels"}},
		{"JSON nesting bound", `{"type":"object","default":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, []string{"schema nests JSON deeper than 128 levels"}},
		{"invalid JSON", `{"type":`, []string{"schema must be valid JSON"}},
		{"trailing data", `{"type":"object"} {}`, []string{"schema must be valid JSON"}},
		{"empty", ``, []string{"schema must be valid JSON"}},
		{"invalid UTF-8", "{\"type\":\"object\",\"title\":\"\xff\"}", []string{"schema must be valid UTF-8"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Check(json.RawMessage(tt.schema))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Check(%s)\n got: %q\nwant: %q", tt.schema, got, tt.want)
			}
		})
	}
}

func TestCheck_SizeBound(t *testing.T) {
	t.Parallel()
	big := fmt.Sprintf(`{"type":"object","description":%q}`, strings.Repeat("x", MaxBytes))
	got := Check(json.RawMessage(big))
	want := []string{"schema is larger than 65536 bytes"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestViolations_Paths(t *testing.T) {
	t.Parallel()
	got := Violations(json.RawMessage(`{"type":"object","properties":{"a":{"type":"number","minimum":0}},"required":["b"]}`))
	want := []Violation{
		{Path: "schema.properties.a.minimum", Text: "schema.properties.a.minimum is not a supported keyword (subset: type/oneOf/properties/required/additionalProperties/items/enum/const + annotations)"},
		{Path: "schema.required", Text: `schema.required names "b" which is not in properties`},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	const schema = `{"type":"object","properties":{
		"a":{"type":"object","properties":{"b":{"type":"string"},"c":{"type":"integer"}},"required":["b"],"additionalProperties":false},
		"x":{"type":"string"},
		"n":{"type":"number"},
		"i":{"type":"integer"},
		"f":{"type":"boolean"},
		"z":{"type":"null"},
		"e":{"type":"string","enum":["red","green"]},
		"k":{"type":"number","const":2},
		"list":{"type":"array","items":{"type":"string"}},
		"any":{},
		"v":{"oneOf":[{"type":"string"},{"type":"integer"},{"type":"number"}]}
	},"required":["x"]}`
	tests := []struct {
		name  string
		value string
		want  []string
	}{
		{"valid", `{"x":"s","a":{"b":"t","c":3},"n":1.5,"i":2.0,"f":true,"z":null,"e":"red","k":2.0,"list":["p"],"any":{"deep":[1,{"q":null}]},"v":"s","extra":1}`, nil},
		{"missing required nested", `{"x":"s","a":{}}`, []string{`missing required property "a.b"`}},
		{"missing required root", `{}`, []string{`missing required property "x"`}},
		{"must be a string", `{"x":1}`, []string{`"x" must be a string`}},
		{"undeclared with additionalProperties false", `{"x":"s","a":{"b":"t","k":1}}`, []string{`"a.k" is not a declared property (additionalProperties: false)`}},
		{"oneOf matched none", `{"x":"s","v":true}`, []string{`"v" must match exactly one oneOf branch (matched 0)`}},
		{"oneOf matched two", `{"x":"s","v":3}`, []string{`"v" must match exactly one oneOf branch (matched 2)`}},
		{"number", `{"x":"s","n":"1"}`, []string{`"n" must be a number`}},
		{"non-finite number", `{"x":"s","n":1e400}`, []string{`"n" must be a finite JSON number`}},
		{"negative zero", `{"x":"s","n":-0}`, []string{`"n" must be a finite JSON number`}},
		{"integer", `{"x":"s","i":1.5}`, []string{`"i" must be an integer`}},
		{"boolean", `{"x":"s","f":"true"}`, []string{`"f" must be a boolean`}},
		{"null", `{"x":"s","z":0}`, []string{`"z" must be null`}},
		{"enum", `{"x":"s","e":"blue"}`, []string{`"e" must be one of ["red","green"]`}},
		{"const", `{"x":"s","k":3}`, []string{`"k" must be 2`}},
		{"array items with index", `{"x":"s","list":["a",2,"c",false]}`, []string{`"list[1]" must be a string`, `"list[3]" must be a string`}},
		{"not an array", `{"x":"s","list":"a"}`, []string{`"list" must be an array`}},
		{"nested object not an object", `{"x":"s","a":[]}`, []string{`"a" must be an object`}},
		{"unconstrained must be lossless", `{"x":"s","any":[1e400]}`, []string{`"any" must be a lossless JSON value`}},
		{"duplicate keys are lossy", `{"x":"s","x":"t"}`, []string{`"arguments" must be a lossless JSON object`}},
		{"root not an object", `[]`, []string{`"arguments" must be an object`}},
		{"invalid JSON", `{`, []string{`"arguments" must be valid JSON`}},
		{"all violations in walk order", `{"a":{"c":"no","q":1},"x":2,"i":"1"}`, []string{
			`missing required property "a.b"`,
			`"a.c" must be an integer`,
			`"a.q" is not a declared property (additionalProperties: false)`,
			`"x" must be a string`,
			`"i" must be an integer`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := Validate(json.RawMessage(schema), json.RawMessage(tt.value))
			if !slices.Equal(got, tt.want) {
				t.Errorf("Validate(%s)\n got: %q\nwant: %q", tt.value, got, tt.want)
			}
		})
	}
}

func TestValidate_NonObjectRootAndBrokenSchema(t *testing.T) {
	t.Parallel()
	if got := Validate(json.RawMessage(`{"type":"string"}`), json.RawMessage(`1`)); !slices.Equal(got, []string{`"arguments" must be a string`}) {
		t.Errorf("scalar root: got %q", got)
	}
	if got := Validate(json.RawMessage(`{"type":"string","minLength":1}`), json.RawMessage(`"x"`)); len(got) != 1 || !strings.HasPrefix(got[0], "schema.minLength is not a supported keyword") {
		t.Errorf("broken schema: got %q", got)
	}
}
