package registry

import (
	"errors"
	"fmt"
	"sort"
)

// Default per-source limits of a Location placement.
const (
	DefaultMaxTools       = 256
	DefaultMaxSchemaBytes = 4 << 20
)

var (
	// ErrNameTaken is wrapped by the *RegistrationError of an entry whose name another
	// source of the Location holds, when neither lists it in Batch.Overrides.
	ErrNameTaken = errors.New("registry: name held by another source")
	// ErrReleased is returned by Registration.Replace on a released Registration.
	ErrReleased = errors.New("registry: registration released")
)

// SourceLimits bound what one source generation holds in a Location placement,
// counted over all its active batches. Zero fields mean the defaults.
type SourceLimits struct {
	// MaxTools is the number of tools; default 256.
	MaxTools int
	// MaxSchemaBytes is the total of each tool's description and canonical input,
	// output and structured schemas, in bytes; default 4 MiB.
	MaxSchemaBytes int64
}

func (l SourceLimits) withDefaults() SourceLimits {
	if l.MaxTools <= 0 {
		l.MaxTools = DefaultMaxTools
	}
	if l.MaxSchemaBytes <= 0 {
		l.MaxSchemaBytes = DefaultMaxSchemaBytes
	}
	return l
}

// LimitError reports a batch refused because its source would exceed a limit. It is
// the Err of a *RegistrationError.
type LimitError struct {
	// Limit is "max_tools" or "max_schema_bytes", as the Location config names it.
	Limit string
	// Value is what the source would hold with the batch; Max the configured limit.
	Value, Max int64
}

func (e *LimitError) Error() string {
	what := "tools"
	if e.Limit == "max_schema_bytes" {
		what = "bytes of tool definitions"
	}
	return fmt.Sprintf("the source would hold %d %s, over its limit %s of %d", e.Value, what, e.Limit, e.Max)
}

// usage is what one source generation holds in a placement.
type usage struct {
	tools int
	bytes int64
}

// account adds (sign +1) or removes (-1) entries from src's usage. The caller holds
// r.mu.
func (p *placement) account(src Source, entries []*entry, sign int) {
	if p.usage == nil {
		return // the application placement is not limited
	}
	u := p.usage[src]
	if u == nil {
		u = &usage{}
		p.usage[src] = u
	}
	for _, e := range entries {
		u.tools += sign
		u.bytes += int64(sign) * e.size
	}
	if u.tools == 0 {
		delete(p.usage, src)
	}
}

// checkLimits refuses a batch that would take its source generation over its limits,
// counting old's entries (being replaced) as gone. The caller holds r.mu.
func checkLimits(p *placement, b Batch, entries []*entry, old *Registration) error {
	lim := b.Limits.withDefaults()
	var u usage
	if cur := p.usage[b.Source]; cur != nil {
		u = *cur
	}
	if old != nil && old.source == b.Source {
		for _, e := range old.entries {
			u.tools--
			u.bytes -= e.size
		}
	}
	for _, e := range entries {
		u.tools++
		u.bytes += e.size
	}
	var err error
	switch {
	case u.tools > lim.MaxTools:
		err = &LimitError{Limit: "max_tools", Value: int64(u.tools), Max: int64(lim.MaxTools)}
	case u.bytes > lim.MaxSchemaBytes:
		err = &LimitError{Limit: "max_schema_bytes", Value: u.bytes, Max: lim.MaxSchemaBytes}
	default:
		return nil
	}
	return &RegistrationError{Source: b.Source.String(), Err: err}
}

// checkOwnership refuses a batch with a name another source of the placement holds,
// unless the batch or the holder lists it in Overrides. Names that differ only by
// letter case are one name here ("Read" beside the built-in "read" is a takeover),
// though each stays as authored. old's entries (being replaced) do not count as
// holders. The caller holds r.mu.
func checkOwnership(p *placement, b Batch, entries []*entry, old *Registration) error {
	sorted := make([]*entry, 0, len(entries))
	wanted := make(map[string]bool, len(entries)) // folded names of the entries checked
	for _, e := range entries {
		if !e.overrides {
			sorted = append(sorted, e)
			wanted[foldName(e.name)] = true
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	held := map[string][]string{} // folded name → the placement's names that fold to it
	for name := range p.names {
		if k := foldName(name); wanted[k] {
			held[k] = append(held[k], name)
		}
	}
	for _, e := range sorted {
		names := held[foldName(e.name)]
		sort.Slice(names, func(i, j int) bool { // the same spelling first
			if (names[i] == e.name) != (names[j] == e.name) {
				return names[i] == e.name
			}
			return names[i] < names[j]
		})
		for _, name := range names {
			for _, x := range p.names[name] {
				if x.source.same(b.Source) || x.overrides || (old != nil && old.holds(x)) {
					continue
				}
				rerr := &RegistrationError{Tool: e.name, Source: b.Source.String(), Owner: x.source.String(), Err: ErrNameTaken}
				if name != e.name {
					rerr.Held = name
				}
				return rerr
			}
		}
	}
	return nil
}

func (g *Registration) holds(x *entry) bool {
	for _, e := range g.entries {
		if e == x {
			return true
		}
	}
	return false
}

// winner is the effective entry among a name's active entries (oldest first): the
// latest that overrides, else the latest.
func winner(list []*entry) *entry {
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].overrides {
			return list[i]
		}
	}
	return list[len(list)-1]
}
