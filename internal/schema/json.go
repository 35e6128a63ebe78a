package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// kind is the JSON type of a parsed value.
type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// value is a parsed JSON value that, unlike map[string]any, keeps object keys
// in document order (so violations come out in walk order) and notices
// duplicate keys and out-of-range numbers, which a plain decode would
// silently lose.
type value struct {
	kind kind
	b    bool
	num  string // the number's lexeme
	str  string
	arr  []*value
	keys []string // object keys in document order
	vals []*value // object values, parallel to keys
	// dup is the first key that occurs twice in this object, "" if none.
	dup string
}

// field returns the object member named k.
func (v *value) field(k string) (*value, bool) {
	for i, key := range v.keys {
		if key == k {
			return v.vals[i], true
		}
	}
	return nil, false
}

// has reports whether the object has a member named k.
func (v *value) has(k string) bool {
	_, ok := v.field(k)
	return ok
}

// float returns the number's value; ok is false when it is not a finite
// float64 (for example 1e400).
func (v *value) float() (f float64, ok bool) {
	f, err := strconv.ParseFloat(v.num, 64)
	return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
}

// finiteNumber reports whether v is a number that survives a round trip
// through a float64: finite and not negative zero.
func (v *value) finiteNumber() bool {
	if v.kind != kindNumber {
		return false
	}
	f, ok := v.float()
	return ok && !(f == 0 && math.Signbit(f))
}

// lossless reports whether v and everything inside it is JSON data that a
// consumer decodes without loss: finite numbers other than -0 and objects
// without duplicate keys.
func (v *value) lossless() bool {
	switch v.kind {
	case kindNumber:
		return v.finiteNumber()
	case kindArray:
		for _, e := range v.arr {
			if !e.lossless() {
				return false
			}
		}
	case kindObject:
		if v.dup != "" {
			return false
		}
		for _, e := range v.vals {
			if !e.lossless() {
				return false
			}
		}
	}
	return true
}

// equal reports JSON equality of two scalars; numbers compare by value.
func (v *value) equal(w *value) bool {
	if v.kind != w.kind {
		return false
	}
	switch v.kind {
	case kindNull:
		return true
	case kindBool:
		return v.b == w.b
	case kindString:
		return v.str == w.str
	case kindNumber:
		a, aok := v.float()
		b, bok := w.float()
		return aok && bok && a == b
	}
	return false
}

// String renders v as compact JSON, for messages.
func (v *value) String() string {
	var sb strings.Builder
	v.write(&sb)
	return sb.String()
}

func (v *value) write(sb *strings.Builder) {
	switch v.kind {
	case kindNull:
		sb.WriteString("null")
	case kindBool:
		sb.WriteString(strconv.FormatBool(v.b))
	case kindNumber:
		sb.WriteString(v.num)
	case kindString:
		sb.WriteString(quote(v.str))
	case kindArray:
		sb.WriteByte('[')
		for i, e := range v.arr {
			if i > 0 {
				sb.WriteByte(',')
			}
			e.write(sb)
		}
		sb.WriteByte(']')
	case kindObject:
		sb.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(quote(k))
			sb.WriteByte(':')
			v.vals[i].write(sb)
		}
		sb.WriteByte('}')
	}
}

// quote renders s as a JSON string without HTML escaping.
func quote(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return strings.TrimSuffix(buf.String(), "\n")
}

// errTooDeep reports JSON nested deeper than the parser's limit.
var errTooDeep = errors.New("nested too deeply")

// parse decodes one JSON document, rejecting trailing data and nesting
// deeper than maxNesting arrays/objects.
func parse(data []byte, maxNesting int) (*value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseValue(dec, maxNesting)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func parseValue(dec *json.Decoder, depthLeft int) (*value, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &value{kind: kindNull}, nil
	case bool:
		return &value{kind: kindBool, b: t}, nil
	case json.Number:
		return &value{kind: kindNumber, num: t.String()}, nil
	case string:
		return &value{kind: kindString, str: t}, nil
	case json.Delim:
		if depthLeft == 0 {
			return nil, errTooDeep
		}
		switch t {
		case '[':
			v := &value{kind: kindArray, arr: []*value{}}
			for dec.More() {
				e, err := parseValue(dec, depthLeft-1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, e)
			}
			_, err := dec.Token() // ']'
			return v, err
		case '{':
			v := &value{kind: kindObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string) // the decoder only yields string keys
				e, err := parseValue(dec, depthLeft-1)
				if err != nil {
					return nil, err
				}
				if v.dup == "" && v.has(k) {
					v.dup = k
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, e)
			}
			_, err := dec.Token() // '}'
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}
