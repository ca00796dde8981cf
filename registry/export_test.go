package registry

// RunTestHelper runs the helper process the environment names, if any, and exits;
// else it returns (see runHelper).
var RunTestHelper = runHelper
