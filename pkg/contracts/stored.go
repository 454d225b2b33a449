package contracts

import (
	"fmt"
	"net/http"
)

// Codes of stored responses and prompt templates.
const (
	// CodePreviousResponseNotFound (404): previous_response_id names no
	// stored response of the tenant (never stored, store false, deleted,
	// expired, or another tenant's); OpenAI's code.
	CodePreviousResponseNotFound = "previous_response_not_found"
	// CodeConversationTooLarge (400): the conversation of
	// previous_response_id with the new input is over the request limit;
	// nothing is cut, the client starts a new conversation.
	CodeConversationTooLarge = "conversation_too_large"
	// CodePromptNotFound (404): prompt.id names no prompt of the tenant,
	// or prompt.version no version of it.
	CodePromptNotFound = "prompt_not_found"
	// CodeMissingPromptVariable (400): the prompt's template uses a
	// {{variable}} that prompt.variables does not give.
	CodeMissingPromptVariable = "missing_prompt_variable"
)

// ErrResponseNotFound is the 404 of a response id the tenant has no stored
// response under.
func ErrResponseNotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Code: CodeNotFound,
		Message: fmt.Sprintf("Response with id '%s' not found.", id)}
}

// ErrPreviousResponseNotFound is the 404 of a previous_response_id the
// tenant has no stored response under.
func ErrPreviousResponseNotFound(id string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: "previous_response_id", Code: CodePreviousResponseNotFound,
		Message: fmt.Sprintf("Previous response with id '%s' not found.", id)}
}

// ErrPromptNotFound is the 404 of a prompt (or version) the tenant does
// not have.
func ErrPromptNotFound(param, what string) *Error {
	return &Error{Status: http.StatusNotFound, Type: TypeInvalidRequest, Param: param, Code: CodePromptNotFound, Message: what}
}
