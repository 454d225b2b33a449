package extract

import "fmt"

// ParseError reports a document that could not be parsed. It wraps the cause.
type ParseError struct {
	Format string
	Err    error
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("extract: cannot parse %s document: %v", e.Format, e.Err)
}

func (e *ParseError) Unwrap() error { return e.Err }

func parseError(format string, err error) error {
	return &ParseError{Format: format, Err: err}
}
