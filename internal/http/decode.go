package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-playground/validator/v10"

	"github.com/subagentd/subagentd/internal/model"
	"github.com/subagentd/subagentd/internal/store"
	"github.com/subagentd/subagentd/internal/subagent"
)

// Bounds of the wire format (mirrored in api/openapi.yaml).
const (
	maxIDLength  = 128
	maxBlockType = 64
	maxPageLimit = 1000
	defPageLimit = 100
)

// safeID is what a caller-reserved id may look like (childId): a letter or
// digit, then letters, digits, '.', '_' and '-' — safe in paths, logs and
// file names.
var safeID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// newValidator returns the validator of the wire structs: field paths use
// JSON names, the "blocktext" tag bounds the total text of content blocks
// in bytes, "blocktypes" bounds each block's type, and "safeid" requires
// safeID.
func newValidator() *validator.Validate {
	v := validator.New(validator.WithRequiredStructEnabled())
	v.RegisterTagNameFunc(func(f reflect.StructField) string {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			return ""
		}
		return name
	})
	// The registration can fail only for an empty tag or a nil func.
	if err := v.RegisterValidation("blocktext", func(fl validator.FieldLevel) bool {
		blocks, ok := fl.Field().Interface().([]model.Block)
		if !ok {
			return false
		}
		limit, err := strconv.Atoi(fl.Param())
		if err != nil {
			return false
		}
		total := 0
		for _, b := range blocks {
			total += len(b.Text)
		}
		return total <= limit
	}); err != nil {
		panic(err)
	}
	if err := v.RegisterValidation("blocktypes", func(fl validator.FieldLevel) bool {
		blocks, ok := fl.Field().Interface().([]model.Block)
		return ok && !slices.ContainsFunc(blocks, func(b model.Block) bool { return len(b.Type) > maxBlockType })
	}); err != nil {
		panic(err)
	}
	if err := v.RegisterValidation("safeid", func(fl validator.FieldLevel) bool {
		return safeID.MatchString(fl.Field().String())
	}); err != nil {
		panic(err)
	}
	return v
}

// bodyReadTimeout bounds reading one request body.
const bodyReadTimeout = 30 * time.Second

// decode reads a request body of at most s.bodyLimit bytes into dst with
// unmarshal. Returns EPayloadTooLarge (the rest of the body is discarded
// after the answer, see linger) or unmarshal's EInvalidRequest.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, dst any) error {
	data, err := s.readBody(w, r)
	if err != nil {
		return err
	}
	return s.unmarshal(data, dst)
}

// readBody reads a request body of at most s.bodyLimit bytes, as decode
// does before it unmarshals it.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	data, err := readWithin(w, http.MaxBytesReader(w, r.Body, s.bodyLimit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, s.tooLarge(w, r)
		}
		return nil, decodeError(err, s.bodyLimit)
	}
	return data, nil
}

// readWithin reads the body of w's request to its end within
// bodyReadTimeout: a client that trickles its body must not hold a handler
// for ever (the server sets no ReadTimeout: it would end event streams).
func readWithin(w http.ResponseWriter, body io.Reader) ([]byte, error) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	defer rc.SetReadDeadline(time.Time{})
	return io.ReadAll(body)
}

// checkBodyText checks that a JSON request body is UTF-8 and holds no NUL
// character and no unpaired surrogate escape: encoding/json would turn
// invalid UTF-8 and such a surrogate into U+FFFD without a word, and no
// store keeps a NUL. Returns EInvalidRequest.
func checkBodyText(data []byte) error {
	if !utf8.Valid(data) {
		return subagent.Errorf(subagent.EInvalidRequest, "request body is not valid UTF-8")
	}
	if err := store.CheckJSONText(data); err != nil {
		return &subagent.Error{Code: subagent.EInvalidRequest, Message: "request body: " + err.Error(), Err: err}
	}
	return nil
}

// checkedBody is the body of a request another face's SDK decodes (A2A,
// MCP): it reads the whole body at its first Read and checks it as
// checkBodyText does, so that text the SDK's JSON decoder would alter
// without a word fails that Read and every later one, and the SDK answers
// in its own protocol (a JSON-RPC parse error, a 400) with the reason.
// A failed read (a body over the bound, or not read within
// bodyReadTimeout) fails them alike.
type checkedBody struct {
	w    http.ResponseWriter // whose request body is read
	body io.ReadCloser
	data *bytes.Reader // once read
	err  error
}

func (b *checkedBody) Read(p []byte) (int, error) {
	if b.data == nil {
		data, err := readWithin(b.w, b.body)
		if err == nil {
			err = checkBodyText(data)
		}
		b.data, b.err = bytes.NewReader(data), err
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.data.Read(p)
}

func (b *checkedBody) Close() error { return b.body.Close() }

// unmarshal reads data, which must be one JSON object, into dst, rejecting
// null, non-objects, invalid UTF-8, NUL characters, unknown fields and
// trailing data, then validates dst:
// a request body as decode reads it, or the arguments another face (MCP)
// passes on. Returns EInvalidRequest (with per-field errors).
func (s *Server) unmarshal(data []byte, dst any) error {
	// null, arrays and scalars decode into a struct without complaint.
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return subagent.Errorf(subagent.EInvalidRequest, "request body must be a JSON object")
	}
	if err := checkBodyText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, s.bodyLimit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			return subagent.Errorf(subagent.EInvalidRequest, "request body must hold exactly one JSON object")
		}
		return decodeError(err, s.bodyLimit)
	}
	return s.check(dst)
}

// check validates a wire struct. Returns EInvalidRequest listing every
// violated field.
func (s *Server) check(v any) error {
	err := s.validate.Struct(v)
	if err == nil {
		return nil
	}
	var ves validator.ValidationErrors
	if !errors.As(err, &ves) {
		return fmt.Errorf("validate %T: %w", v, err)
	}
	fields := map[string]string{}
	for _, fe := range ves {
		_, path, _ := strings.Cut(fe.Namespace(), ".") // drop the struct name
		fields[path] = fieldMessage(fe)
	}
	return invalid(fields)
}

// fieldMessage words one validation failure for clients.
func fieldMessage(fe validator.FieldError) string {
	unit := "characters"
	switch fe.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		unit = "items"
		if fe.Type() == reflect.TypeFor[json.RawMessage]() {
			unit = "bytes"
		}
	case reflect.Int, reflect.Int64:
		unit = ""
	}
	switch fe.Tag() {
	case "required":
		return "is required"
	case "required_without":
		return "is required when " + lowerFirst(fe.Param()) + " is absent"
	case "max":
		if unit == "" {
			return "must be at most " + fe.Param()
		}
		return "must have at most " + fe.Param() + " " + unit
	case "min":
		if unit == "" {
			return "must be at least " + fe.Param()
		}
		return "must have at least " + fe.Param() + " " + unit
	case "oneof":
		return "must be one of: " + strings.ReplaceAll(fe.Param(), " ", ", ")
	case "startswith":
		return "must start with " + strconv.Quote(fe.Param())
	case "blocktext":
		return "text of the blocks must total at most " + fe.Param() + " bytes"
	case "blocktypes":
		return fmt.Sprintf("every block type must have at most %d characters", maxBlockType)
	case "safeid":
		return "must match " + safeID.String()
	default:
		return "is invalid (" + fe.Tag() + ")"
	}
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

// decodeError turns a JSON decoding failure into EPayloadTooLarge or
// EInvalidRequest. Decoder messages describe only the client's input.
func decodeError(err error, limit int64) error {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return subagent.Errorf(subagent.EPayloadTooLarge, "request body exceeds %d bytes", limit)
	case errors.Is(err, io.EOF):
		return subagent.Errorf(subagent.EInvalidRequest, "request body must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return subagent.Errorf(subagent.EInvalidRequest, "request body is truncated JSON")
	case errors.As(err, &syntax):
		return subagent.Errorf(subagent.EInvalidRequest, "request body is malformed JSON at byte %d", syntax.Offset)
	case errors.As(err, &typeErr):
		if typeErr.Field == "" {
			return subagent.Errorf(subagent.EInvalidRequest, "request body must be a JSON object")
		}
		return invalid(map[string]string{typeErr.Field: "must be " + jsonKind(typeErr.Type)})
	}
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		field, uerr := strconv.Unquote(name)
		if uerr != nil {
			field = name
		}
		return invalid(map[string]string{field: "is not a known field"})
	}
	// Errors of custom unmarshalers, e.g. model.Block's "content block
	// needs a string \"type\"".
	return &subagent.Error{Code: subagent.EInvalidRequest, Message: "invalid request body: " + err.Error(), Err: err}
}

// jsonKind names the JSON type a Go type decodes from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "an object"
	}
}

// params reads query parameters and path ids, collecting every problem so
// that one answer lists them all.
type params struct {
	r      *http.Request // nil for queryParams: no path ids, no headers
	query  url.Values
	fields map[string]string
}

func newParams(r *http.Request) *params {
	return &params{r: r, query: r.URL.Query(), fields: map[string]string{}}
}

// queryParams reads query parameters from q alone: a route's query as
// another face passes it (operations.go). Path ids and headers are not
// read through it.
func queryParams(q url.Values) *params { return &params{query: q, fields: map[string]string{}} }

func (p *params) fail(name, msg string) { p.fields[name] = msg }

// err returns EInvalidRequest when any parameter was invalid.
func (p *params) err() error {
	if len(p.fields) == 0 {
		return nil
	}
	return invalid(p.fields)
}

// id returns the path parameter name, which must be an id (validID).
func (p *params) id(name string) string {
	v := chi.URLParam(p.r, name)
	if !validID(v) {
		p.fail(name, idRule)
	}
	return v
}

// idRule is what validID asks of an id, as a field message.
var idRule = fmt.Sprintf("must have 1 to %d characters", maxIDLength)

// validID reports whether v can be an id: 1..maxIDLength characters, no NUL.
func validID(v string) bool {
	return v != "" && utf8.RuneCountInString(v) <= maxIDLength && !strings.ContainsRune(v, 0)
}

// checkID returns EInvalidRequest naming field when v is no valid id.
func checkID(field, v string) error {
	if validID(v) {
		return nil
	}
	return invalid(map[string]string{field: idRule})
}

// str returns the query parameter name ("" when absent); present values
// must be 1..maxLen characters.
func (p *params) str(name string, maxLen int) string {
	q := p.query
	if !q.Has(name) {
		return ""
	}
	v := q.Get(name)
	if v == "" || !utf8.ValidString(v) || utf8.RuneCountInString(v) > maxLen || strings.ContainsRune(v, 0) {
		p.fail(name, fmt.Sprintf("must have 1 to %d characters", maxLen))
	}
	return v
}

// int returns the query parameter name as an integer in [lo, hi], or def
// when absent.
func (p *params) int(name string, def, lo, hi int64) int64 {
	q := p.query
	if !q.Has(name) {
		return def
	}
	n, err := strconv.ParseInt(q.Get(name), 10, 64)
	if err != nil || n < lo || n > hi {
		p.fail(name, fmt.Sprintf("must be an integer from %d to %d", lo, hi))
		return def
	}
	return n
}

// bool returns the query parameter name ("true" or "false"), false when
// absent.
func (p *params) bool(name string) bool {
	q := p.query
	if !q.Has(name) {
		return false
	}
	switch q.Get(name) {
	case "true":
		return true
	case "false":
		return false
	}
	p.fail(name, "must be true or false")
	return false
}

// limit returns the page size parameter.
func (p *params) limit() int { return int(p.int("limit", defPageLimit, 1, maxPageLimit)) }

// resume returns where a stream resumes: the Last-Event-ID header, else the
// after query parameter, else def. Both must be integers >= lo; a malformed
// value fails the request (400) rather than silently replaying from the
// start.
func (p *params) resume(def, lo int64) (after int64, given bool) {
	if h := p.r.Header.Get("Last-Event-ID"); h != "" {
		n, err := strconv.ParseInt(h, 10, 64)
		if err != nil || n < lo {
			p.fail("Last-Event-ID", fmt.Sprintf("must be an integer >= %d", lo))
			return def, false
		}
		return n, true
	}
	if !p.query.Has("after") {
		return def, false
	}
	return p.int("after", def, lo, 1<<62), true
}
