// Package wordlist holds, as a test, the rule that the project speaks only
// of itself: code, docs, test names, command output and file names describe
// the system, never the work that built it (work periods, who ran what,
// branches, commit hashes, issue or item numbers). It has no code of its
// own; see wordlist_test.go for the patterns.
package wordlist
