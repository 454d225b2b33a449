package contracts

import (
	"fmt"
	"net/http"
	"strings"
)

// Codes of routers and their tools.
const (
	// CodeUnknownRouteClass: the X-AI-Route header names no class of the
	// router.
	CodeUnknownRouteClass = "unknown_route_class"
	// CodeToolFailed: a route class's tool did not answer in the expected
	// shape (status, body size, JSON).
	CodeToolFailed = "tool_failed"
	// CodeToolTimeout: a route class's tool did not answer in time.
	CodeToolTimeout = "tool_timeout"
)

// ErrUnknownRouteClass is the 400 of an X-AI-Route header naming no class.
func ErrUnknownRouteClass(router, class string, classes []string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: "X-AI-Route", Code: CodeUnknownRouteClass,
		Message: fmt.Sprintf("The router '%s' has no route class '%s'; its classes are: %s.", router, class, strings.Join(classes, ", "))}
}

// ErrTool is the 502 of a tool that failed (code CodeToolFailed or
// CodeToolTimeout).
func ErrTool(code, class, why string) *Error {
	return &Error{Status: http.StatusBadGateway, Type: TypeServer, Code: code,
		Message: fmt.Sprintf("The tool of route class '%s' failed: %s.", class, why)}
}
