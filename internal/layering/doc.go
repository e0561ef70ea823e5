// Package layering holds the project's import rules as a test: which
// package may import which, so that the layering written in every package
// doc cannot rot. It has no code of its own; see layering_test.go for the
// layer table and the named rules, and README.md ("What is where") for the
// layout they describe.
package layering
