package location

import (
	"encoding/json"
	"strconv"

	"github.com/toolhost/toolhost/internal/sandbox"
	sandboxcfg "github.com/toolhost/toolhost/sandbox"
)

// SandboxConfig is a source's "sandbox" block (with its "require_sandbox" flag).
// For an untrusted plugin it widens the default confinement; for a trusted plugin,
// an MCP server or a manifest tool it turns confinement on. Every source is
// contained whatever it says.
type SandboxConfig struct {
	// Read and Write are absolute paths (relative ones in the file are resolved
	// against the Location directory) the source may read, or read and write.
	Read, Write []string
	// Network allows TCP.
	Network bool
	// MemoryBytes, Processes, OpenFiles cap the source's resources; zero means the
	// default (see sandbox.Limits).
	MemoryBytes, Processes, OpenFiles int64
	// CPUs caps its CPU time at this many CPUs where the cgroup v2 cpu controller
	// is delegated (see sandbox.Limits.CPUs); zero means no cap.
	CPUs float64
	// TmpBytes and TmpFiles cap its TMPDIR (a tmpfs of its own where it has a
	// world, see sandbox.WorldAvailable); zero means the default (sandbox.TmpLimits).
	TmpBytes, TmpFiles int64
}

type rawSandbox struct {
	Read      []string    `json:"read"`
	Write     []string    `json:"write"`
	Network   bool        `json:"network"`
	Memory    string      `json:"memory"`
	Processes json.Number `json:"processes"`
	OpenFiles json.Number `json:"open_files"`
	CPUs      json.Number `json:"cpus"`
	TmpSize   string      `json:"tmp_size"`
	TmpFiles  json.Number `json:"tmp_files"`
}

// sandbox decodes a "sandbox" block at path; nil stays nil.
func (d *decoder) sandbox(path string, raw *rawSandbox) *SandboxConfig {
	if raw == nil {
		return nil
	}
	c := &SandboxConfig{
		Network:   raw.Network,
		Processes: d.count(path+"/processes", raw.Processes),
		OpenFiles: d.count(path+"/open_files", raw.OpenFiles),
		TmpFiles:  d.count(path+"/tmp_files", raw.TmpFiles),
	}
	for _, p := range raw.Read {
		c.Read = append(c.Read, d.resolve(p))
	}
	for _, p := range raw.Write {
		c.Write = append(c.Write, d.resolve(p))
	}
	if raw.Memory != "" {
		n, err := sandbox.ParseBytes(raw.Memory)
		if err != nil || n < 1<<20 {
			d.problem(path+"/memory", "got %s, want a size of at least 1MiB such as \"512MiB\"", quote(raw.Memory))
		}
		c.MemoryBytes = n
	}
	if raw.CPUs != "" {
		n, err := strconv.ParseFloat(string(raw.CPUs), 64)
		if err != nil || n < 0.01 || n > 1<<20 {
			d.problem(path+"/cpus", "got %s, want a number of CPUs of at least 0.01 such as 0.5", display(raw.CPUs))
		}
		c.CPUs = n
	}
	if raw.TmpSize != "" {
		n, err := sandbox.ParseBytes(raw.TmpSize)
		if err != nil || n < 1<<20 {
			d.problem(path+"/tmp_size", "got %s, want a size of at least 1MiB such as \"256MiB\"", quote(raw.TmpSize))
		}
		c.TmpBytes = n
	}
	return c
}

// sandboxSpec builds a source's sandbox: contained always, confined when confine
// (an untrusted plugin) or when the config has a sandbox block.
func sandboxSpec(name string, c *SandboxConfig, require, confine bool, mode sandboxcfg.Mode) sandboxcfg.Spec {
	spec := sandboxcfg.Spec{Name: name, Contain: true, Require: require, Mode: mode}
	if c != nil {
		spec.Limits = sandboxcfg.Limits{MemoryBytes: c.MemoryBytes, Processes: c.Processes, OpenFiles: c.OpenFiles, CPUs: c.CPUs}
		confine = true
	}
	if confine {
		spec.Confine = &sandboxcfg.Confinement{}
		if c != nil {
			spec.Confine.Read, spec.Confine.Write, spec.Confine.Network = c.Read, c.Write, c.Network
			spec.Confine.Tmp = sandboxcfg.TmpLimits{Bytes: c.TmpBytes, Files: c.TmpFiles}
		}
	}
	return spec
}
