package api

import (
	"context"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestOpenAPI_Valid checks that the embedded document is a valid OpenAPI 3.1
// document with one operationId per operation.
func TestOpenAPI_Valid(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("openapi version %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("validate: %v", err)
	}
	seen := map[string]string{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			where := method + " " + path
			if op.OperationID == "" {
				t.Errorf("%s: no operationId", where)
				continue
			}
			if prev, dup := seen[op.OperationID]; dup {
				t.Errorf("operationId %q used by %s and %s", op.OperationID, prev, where)
			}
			seen[op.OperationID] = where
		}
	}
}

// TestOpenAPI_SchemaNamesLeaveRoomForGenerators: no component schema is
// named like a type that client generators derive from an operationId
// (oapi-codegen's createRunResponse, createRunParams, …; @hey-api's
// createRunData, createRunErrors, …), which would not compile or would be
// renamed. api/clients generates and compiles the clients themselves.
func TestOpenAPI_SchemaNamesLeaveRoomForGenerators(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(OpenAPI)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	suffixes := []string{"Response", "Responses", "Params", "JSONBody", "JSONRequestBody", "Data", "Error", "Errors"}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			id := strings.ToUpper(op.OperationID[:1]) + op.OperationID[1:]
			for _, s := range suffixes {
				if _, ok := doc.Components.Schemas[id+s]; ok {
					t.Errorf("schema %s collides with the %s type generators derive from operation %s", id+s, s, op.OperationID)
				}
			}
		}
	}
}
