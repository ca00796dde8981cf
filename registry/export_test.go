package registry

// RunTestHelper runs the helper process the environment names, if any, and exits;
// else it returns (see runHelper).
var RunTestHelper = runHelper

// ValidatingApart is how many validations run apart from their settlements now.
func ValidatingApart() int64 { return validatingApart.Load() }
