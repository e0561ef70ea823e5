package config

import (
	"errors"
	"fmt"
	"strings"
)

// FieldError is one problem with one key.
type FieldError struct {
	// Key is the dotted key, with list positions: "wan.planes[1].local".
	Key string
	// Msg says what is wrong, quoting the offending value (secrets such as
	// gossip keys are never quoted).
	Msg string
}

func (e *FieldError) Error() string { return e.Key + ": " + e.Msg }

func fieldErr(key, format string, args ...any) *FieldError {
	return &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// ParseError is a file that is not valid YAML or TOML. Nothing else is
// checked in a file that does not parse.
type ParseError struct {
	Line   int // 1-based; 0 when the parser did not say
	Column int // 1-based; 0 when the parser did not say
	Msg    string
}

func (e *ParseError) Error() string {
	switch {
	case e.Line > 0 && e.Column > 0:
		return fmt.Sprintf("line %d, column %d: %s", e.Line, e.Column, e.Msg)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
	}
	return e.Msg
}

// Error is what [Load], [Parse] and [Check] return when a configuration is
// rejected: every problem found, each a [*FieldError], a [*ParseError] or an
// I/O error. errors.As and errors.Is see through it.
type Error struct {
	Path     string // the file, or "" for Parse
	Problems []error
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	if len(e.Problems) == 1 {
		b.WriteString(e.Problems[0].Error())
		return b.String()
	}
	fmt.Fprintf(&b, "%d problems:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.Error())
	}
	return b.String()
}

// Unwrap returns the problems, for errors.Is and errors.As.
func (e *Error) Unwrap() []error { return e.Problems }

// Problems flattens err into its individual problems: the Problems of an
// [*Error], the members of an errors.Join, or err itself.
func Problems(err error) []error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return ce.Problems
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, Problems(e)...)
		}
		return out
	}
	return []error{err}
}
