package plugins

// DefaultSocketDir is defaultSocketDir, for the tests.
var DefaultSocketDir = defaultSocketDir
