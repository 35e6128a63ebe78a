// Package api holds the published HTTP contract of subagentd: the OpenAPI
// 3.1 document that the server serves at /openapi.yaml and that the tests of
// internal/http hold the router, requests and responses to.
package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document (YAML).
//
//go:embed openapi.yaml
var OpenAPI []byte
