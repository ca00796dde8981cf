package plugins

// DefaultSocketDir is defaultSocketDir, for the tests.
var DefaultSocketDir = defaultSocketDir

// Held is what the plugin's messages make the host hold now (its budget's count).
func (inst *Instance) Held() int64 { return inst.budget.held.Load() }
