package registry

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/toolhost/toolhost/tool"
)

// Application is the placement id of process-wide tools. Any other id names a
// Location placement opened with [Registry.OpenLocation].
const Application = ""

// Source identifies where a batch came from. Two batches are generations of the same
// source when Location, Kind and Name are equal; Generation grows with each restart
// or reload.
type Source struct {
	// Kind is the kind of producer: "application", "builtin", "plugin", "mcp", "manifest".
	Kind string `json:"kind"`
	// Name is the producer's name within its Location (a plugin or server name).
	Name string `json:"name"`
	// Generation counts restarts and reloads of the producer.
	Generation uint64 `json:"generation"`
}

func (s Source) String() string {
	if s.Name == "" {
		return s.Kind
	}
	return s.Kind + " " + s.Name
}

// ID names the source without its generation, as permission rules and saved
// approvals name it: the Kind alone when Name is empty ("builtin"), else
// "Kind:Name" ("plugin:text", "mcp:everything", "manifest:shout").
func (s Source) ID() string {
	if s.Name == "" {
		return s.Kind
	}
	return s.Kind + ":" + s.Name
}

// same reports whether s and o are generations of one source.
func (s Source) same(o Source) bool { return s.Kind == o.Kind && s.Name == o.Name }

// Owner is what the registry needs of the scope that owns a batch: a context that
// ends when the owner closes, and tracking of executions so the owner's close can wait
// for them. *scope.Scope satisfies it.
type Owner interface {
	Context() context.Context
	Track() (done func(), err error)
}

// Batch is the argument of Register: the tools one owner registers at once.
type Batch struct {
	// Location is the placement: Application or an open Location id.
	Location string
	// Source identifies the producer and its generation.
	Source Source
	// Tools maps authored names to tools. Register copies it; changing the map
	// afterwards changes nothing.
	Tools map[string]tool.Tool
	// Owner, if set, bounds every execution of these tools: an execution runs under a
	// context that also ends when the owner's context ends, and is tracked by the owner.
	// Register fails with ErrOwnerClosed if the owner's context has already ended.
	Owner Owner
	// OwnerJoined says the tools' executors themselves end every execution when the
	// owner's context ends (each joins its call's context with the owner's, as a
	// plugin's executors do with their call timeout in the same context), so the
	// registry does not join them too: a context, its channel and a registration
	// fewer per call. An execution whose owner closed still settles as one.
	OwnerJoined bool
	// Overrides are the (normalized) names this source may take over in a Location
	// placement although another source holds them; see Registry.Register. The
	// application placement ignores them.
	Overrides []string
	// Limits bound what this source holds in a Location placement; zero fields mean
	// the defaults (256 tools, 4 MiB of definitions).
	Limits SourceLimits
}

// Options configure a Registry.
type Options struct {
	// Storage retains oversized output. Required.
	Storage *Storage
	// Limits apply to the application placement and to Locations opened without
	// limits of their own. Zero fields mean the defaults.
	Limits Limits
	// MaxInputBytes bounds a call's raw input; default 4 MiB.
	MaxInputBytes int
	// Observer, if set, watches every settlement (see Observer).
	Observer Observer
}

// Registry holds placements, registrations and hooks. It is safe for concurrent use:
// registrations, releases, Requests and settlements may come from many goroutines.
type Registry struct {
	storage       *Storage
	maxInputBytes int
	schemas       schemaCache
	observer      Observer
	apart         apartCounts // validations running apart, per source (validcost.go)

	mu         sync.RWMutex
	placements map[string]*placement
	seq        uint64        // orders registrations
	changed    chan struct{} // closed and replaced at every change (see Changed)
}

// placement is one store: the application or one Location.
type placement struct {
	limits  Limits
	names   map[string][]*entry // active entries per name, oldest first
	hooks   []*hookEntry        // in registration order
	version uint64              // grows with every change to names
	usage   map[Source]*usage   // what each source generation holds (Location placements)
	holds   map[Source]*Hold    // by source, Generation 0 (see Hold)

	// cached is the last Request prepared here, valid while both versions match.
	cached                *Request
	cachedApp, cachedSelf uint64
}

// entry is one (name → tool) of one batch.
type entry struct {
	name        string
	location    string
	source      Source
	seq         uint64
	tool        tool.Tool
	input       *compiledSchema
	output      *compiledSchema // nil: any JSON
	structured  *compiledSchema // nil: any JSON
	def         Definition
	fingerprint [sha256.Size]byte
	owner       Owner
	ownerJoined bool          // the executor joins its calls with the owner (Batch.OwnerJoined)
	overrides   bool          // the batch may take this name over from another source
	size        int64         // definition bytes counted against SourceLimits.MaxSchemaBytes
	apart       *atomic.Int32 // validations running apart against its source's schemas
	closed      atomic.Bool
}

// Definition is what a model is told about one tool. Its JSON encoding is byte-stable:
// schemas are canonical (sorted keys, no insignificant space).
type Definition struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	// Title and Annotations are the tool's (tool.Tool); for people and clients, not
	// part of the contract a call is checked against (the fingerprint).
	Title       string            `json:"title,omitempty"`
	Annotations *tool.Annotations `json:"annotations,omitempty"`
}

// New returns an empty Registry with an open application placement.
func New(opts Options) (*Registry, error) {
	if opts.Storage == nil {
		return nil, fmt.Errorf("registry: Options.Storage is required")
	}
	limits := opts.Limits.WithDefaults()
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	if opts.MaxInputBytes <= 0 {
		opts.MaxInputBytes = 4 << 20
	}
	return &Registry{
		storage:       opts.Storage,
		maxInputBytes: opts.MaxInputBytes,
		observer:      opts.Observer,
		placements:    map[string]*placement{Application: {limits: limits, names: map[string][]*entry{}}},
		changed:       make(chan struct{}),
	}, nil
}

// Storage returns the managed output storage.
func (r *Registry) Storage() *Storage { return r.storage }

// OpenLocation opens the placement of a Location. limits apply to its settlements
// (zero fields: the registry's). The returned release removes the placement; the
// caller calls it after every batch registered there is released. Opening an id that
// is open fails with ErrLocationOpen.
func (r *Registry) OpenLocation(id string, limits Limits) (release func(), err error) {
	if id == Application {
		return nil, fmt.Errorf("registry: location id must not be empty")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	limits = mergeLimits(limits, r.placements[Application].limits)
	if err := limits.Validate(); err != nil {
		return nil, err
	}
	if _, ok := r.placements[id]; ok {
		return nil, fmt.Errorf("%w: %q", ErrLocationOpen, id)
	}
	p := &placement{limits: limits, names: map[string][]*entry{}, usage: map[Source]*usage{}}
	r.placements[id] = p
	r.changedLocked()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.placements[id] == p {
			delete(r.placements, id)
			r.changedLocked()
		}
	}), nil
}

// SetLocationLimits replaces the output limits of the Location placement id
// (merged with the application's, as OpenLocation merges them): Requests prepared
// from then on bound output by them, while a Request prepared before keeps the
// limits it was prepared with. It fails with an error wrapping ErrInvalidLimits
// and changes nothing when the merged limits are invalid, and with one wrapping
// ErrLocationNotOpen when id is not open.
func (r *Registry) SetLocationLimits(id string, limits Limits) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.placements[id]
	if !ok || id == Application {
		return fmt.Errorf("%w: %q", ErrLocationNotOpen, id)
	}
	limits = mergeLimits(limits, r.placements[Application].limits)
	if err := limits.Validate(); err != nil {
		return err
	}
	if limits != p.limits {
		p.limits = limits
		p.cached = nil
		r.changedLocked()
	}
	return nil
}

// Changed returns a channel that is closed at the next change to the tools any
// Request could see: a batch registered or released, a Location placement opened
// or removed or its limits replaced. It says only that something changed, in some placement: prepare again
// and compare. After it is closed, call Changed again for the next change. It never
// blocks a registration and is safe for concurrent use; toolhost mcp uses it to
// send notifications/tools/list_changed.
func (r *Registry) Changed() <-chan struct{} {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.changed
}

// changedLocked wakes Changed's waiters; r.mu is held for writing.
func (r *Registry) changedLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

func mergeLimits(l, base Limits) Limits {
	if l.MaxLines == 0 {
		l.MaxLines = base.MaxLines
	}
	if l.MaxBytes == 0 {
		l.MaxBytes = base.MaxBytes
	}
	if l.MaxMediaBytes == 0 {
		l.MaxMediaBytes = base.MaxMediaBytes
	}
	if l.MaxRetainedBytes == 0 {
		l.MaxRetainedBytes = base.MaxRetainedBytes
	}
	return l
}

// Register adds a batch atomically: every entry is checked (name grammar, no two
// authored names normalizing to one name, every schema compiling) before anything
// becomes visible; one bad entry fails the call with a *RegistrationError naming it
// and nothing is registered.
//
// Within the placement, the latest active registration of a name wins. The returned
// release removes exactly this batch's entries (revealing earlier ones); it is
// idempotent and safe to call from any goroutine. Executions already begun are not
// affected by the release; only their context ends them.
//
// In a Location placement two more rules hold, checked under the same lock as the
// insertion, so they are atomic with it:
//
//   - Names belong to sources. A name that another source (another Kind and Name;
//     generations of one source are one source) holds there is refused with a
//     *RegistrationError wrapping ErrNameTaken and naming the holder, unless this
//     batch lists the name in Overrides or the holder does. An entry whose batch
//     lists its name in Overrides wins over entries that do not, whatever their
//     order, so an allowed override beats the owner even when the owner registers
//     later; among entries alike in that respect the latest wins, as everywhere.
//   - Limits. What one source generation holds there — its tools and their
//     definition bytes (description and canonical schemas) — must stay within
//     b.Limits, else a *RegistrationError wrapping a *LimitError.
//
// The application placement has neither rule: the embedding application's
// registrations overlay each other freely.
func (r *Registry) Register(b Batch) (release func(), err error) {
	g, err := r.Add(b)
	if err != nil {
		return nil, err
	}
	return g.Release, nil
}

// Add is Register returning the *Registration, which can also be replaced in place.
func (r *Registry) Add(b Batch) (*Registration, error) {
	return r.add(b, nil)
}

func (r *Registry) add(b Batch, old *Registration) (*Registration, error) {
	entries, err := r.buildEntries(b)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.placements[b.Location]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrLocationNotOpen, b.Location)
	}
	if b.Owner != nil && b.Owner.Context().Err() != nil {
		return nil, fmt.Errorf("%w: register from %s", ErrOwnerClosed, b.Source)
	}
	if old != nil {
		if old.p != p || !old.source.same(b.Source) {
			return nil, fmt.Errorf("registry: replace: a registration of %s in %q cannot be replaced by one of %s in %q",
				old.source, old.location, b.Source, b.Location)
		}
		if old.released {
			return nil, fmt.Errorf("%w: replace from %s", ErrReleased, b.Source)
		}
	}
	if b.Location != Application {
		if err := checkLimits(p, b, entries, old); err != nil {
			return nil, err
		}
		if err := checkOwnership(p, b, entries, old); err != nil {
			return nil, err
		}
	}
	r.seq++
	g := &Registration{r: r, p: p, location: b.Location, source: b.Source, entries: entries}
	slots := map[string]*entry{}
	if old != nil {
		for _, e := range old.entries {
			slots[e.name] = e
		}
	}
	for _, e := range entries {
		if prev, ok := slots[e.name]; ok {
			// In place: the new entry takes the old one's position and order.
			e.seq = prev.seq
			list := p.names[e.name]
			list[slices.Index(list, prev)] = e
			prev.closed.Store(true)
			delete(slots, e.name)
			continue
		}
		e.seq = r.seq
		p.names[e.name] = append(p.names[e.name], e)
	}
	if old != nil {
		old.released = true
		p.account(old.source, old.entries, -1)
		for _, e := range old.entries {
			if slots[e.name] == e {
				p.drop(e)
			}
		}
	}
	p.account(b.Source, entries, +1)
	p.registeredLocked(b.Source, entries)
	p.version++
	r.changedLocked()
	return g, nil
}

// Registration is one registered batch. Its methods are safe for concurrent use.
type Registration struct {
	r        *Registry
	p        *placement
	location string
	source   Source
	entries  []*entry
	released bool // guarded by r.mu
}

// Release removes exactly this batch's entries, revealing earlier ones. It is
// idempotent; a Registration that Replace superseded is already released. A source
// going down releases its batches: while its Hold is armed, the entries stay
// advertised until a successor registers (see Hold).
func (g *Registration) Release() { g.release(true) }

// Withdraw is Release for a batch its running source closes on purpose (a runtime
// registration closed): its tools are gone at once, whatever Hold is armed.
func (g *Registration) Withdraw() { g.release(false) }

func (g *Registration) release(retain bool) {
	g.r.mu.Lock()
	defer g.r.mu.Unlock()
	if g.released {
		return
	}
	g.released = true
	g.p.version++
	g.r.changedLocked()
	g.p.account(g.source, g.entries, -1)
	for _, e := range g.entries {
		g.p.drop(e)
	}
	if retain {
		g.p.retainLocked(g)
	}
}

// Replace swaps g for the batch b of the same source and placement in one atomic
// step: a name both hold keeps its slot (its position among the name's
// registrations, so its precedence against other sources is unchanged) with b's
// tool in it; a name only b has is added as Register adds it; a name only g had is
// released. A name both hold is never absent from a Request prepared meanwhile. b is
// checked as Register checks it, with g's entries counted as gone; on any error g
// stays as it was. Replacing a released Registration fails with ErrReleased. On
// success g is released and the new Registration is returned.
func (g *Registration) Replace(b Batch) (*Registration, error) {
	return g.r.add(b, g)
}

// drop removes e from its name's list. The caller holds r.mu.
func (p *placement) drop(e *entry) {
	e.closed.Store(true)
	list := slices.DeleteFunc(p.names[e.name], func(x *entry) bool { return x == e })
	if len(list) == 0 {
		delete(p.names, e.name)
	} else {
		p.names[e.name] = list
	}
}

// buildEntries validates a batch and compiles its schemas, outside any lock.
func (r *Registry) buildEntries(b Batch) ([]*entry, error) {
	authored := make([]string, 0, len(b.Tools))
	for k := range b.Tools {
		authored = append(authored, k)
	}
	sort.Strings(authored) // deterministic: the first bad entry in name order is named
	if err := measureBatch(b, authored); err != nil {
		return nil, err // before anything is compiled
	}
	fail := func(name string, err error) error {
		return &RegistrationError{Tool: name, Source: b.Source.String(), Err: err}
	}
	byName := make(map[string]string, len(authored))
	entries := make([]*entry, 0, len(authored))
	for _, a := range authored {
		name, err := NormalizeName(a)
		if err != nil {
			return nil, fail(a, err)
		}
		if other, dup := byName[name]; dup {
			return nil, fail(a, fmt.Errorf("authored names %q and %q both normalize to %q", other, a, name))
		}
		byName[name] = a
		e, err := r.newEntry(name, b, b.Tools[a])
		if err != nil {
			return nil, fail(a, err)
		}
		entries = append(entries, e)
	}
	return entries, nil
}

func (r *Registry) newEntry(name string, b Batch, t tool.Tool) (*entry, error) {
	if t.Execute == nil {
		return nil, fmt.Errorf("tool has no executor")
	}
	if len(t.InputSchema) == 0 {
		return nil, fmt.Errorf("tool has no input schema")
	}
	e := &entry{name: name, location: b.Location, source: b.Source, tool: t, owner: b.Owner, ownerJoined: b.OwnerJoined,
		overrides: b.Location != Application && slices.Contains(b.Overrides, name), apart: r.apart.of(b.Location, b.Source)}
	var err error
	if e.input, err = r.schemas.compile("input schema", t.InputSchema); err != nil {
		return nil, err
	}
	if len(t.OutputSchema) > 0 {
		if e.output, err = r.schemas.compile("output schema", t.OutputSchema); err != nil {
			return nil, err
		}
	}
	if len(t.StructuredSchema) > 0 {
		if e.structured, err = r.schemas.compile("structured schema", t.StructuredSchema); err != nil {
			return nil, err
		}
	}
	e.def = Definition{Name: name, Description: t.Description, InputSchema: e.input.canonical, Title: t.Title}
	if t.Annotations != nil {
		a := *t.Annotations
		e.def.Annotations = &a
	}
	if e.output != nil {
		e.def.OutputSchema = e.output.canonical
	}
	h := sha256.New()
	for _, part := range [][]byte{[]byte(t.Description), e.def.InputSchema, e.def.OutputSchema, structuredCanonical(e)} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	h.Sum(e.fingerprint[:0])
	e.size = int64(len(t.Description) + len(e.def.InputSchema) + len(e.def.OutputSchema) + len(structuredCanonical(e)))
	return e, nil
}

func structuredCanonical(e *entry) []byte {
	if e.structured == nil {
		return nil
	}
	return e.structured.canonical
}

// effective returns the winning entry for name as seen from location: the latest
// active Location registration, else the latest active application one.
func (r *Registry) effective(location, name string) *entry {
	if location != Application {
		if p, ok := r.placements[location]; ok {
			if list := p.names[name]; len(list) > 0 {
				return winner(list)
			}
		}
	}
	if list := r.placements[Application].names[name]; len(list) > 0 {
		return winner(list)
	}
	return nil
}

// Prepare captures a Request for one model request against a placement: the
// effective registration of every visible name, and their definitions sorted by name.
// Requests are immutable, so while nothing is registered or released in the
// placement (or the application's), Prepare without options returns the same one
// again. Options narrow what is offered (see [Offer] and [OfferAll]); narrowing it to
// the same tools again returns the same narrowed Request.
func (r *Registry) Prepare(location string, opts ...PrepareOption) (*Request, error) {
	q, err := r.prepare(location)
	if err != nil || len(opts) == 0 {
		return q, err
	}
	var cfg prepareConfig
	for _, o := range opts {
		o(&cfg)
	}
	return q.narrow(cfg), nil
}

func (r *Registry) prepare(location string) (*Request, error) {
	r.mu.RLock()
	p, ok := r.placements[location]
	if !ok {
		r.mu.RUnlock()
		return nil, fmt.Errorf("%w: %q", ErrLocationNotOpen, location)
	}
	app := r.placements[Application]
	if q := p.cached; q != nil && p.cachedApp == app.version && p.cachedSelf == p.version {
		r.mu.RUnlock()
		return q, nil
	}
	store := r.storage.forLocation(location, p.limits.MaxRetainedBytes)
	q := &Request{reg: r, location: location, limits: p.limits, entries: map[string]*entry{}, store: &store}
	for _, pl := range []*placement{app, p} {
		for name, list := range pl.names {
			q.entries[name] = winner(list) // the Location placement comes second and wins
		}
	}
	p.retainedFor(func(name string, e *entry) { q.entries[name] = e }) // a source restarting

	q.defs = make([]Definition, 0, len(q.entries))
	for _, e := range q.entries {
		q.defs = append(q.defs, e.def)
	}
	slices.SortFunc(q.defs, func(a, b Definition) int { return strings.Compare(a.Name, b.Name) })
	appVersion, selfVersion := app.version, p.version
	r.mu.RUnlock()

	// Caching needs the write lock; a change in between just means no caching.
	r.mu.Lock()
	if app.version == appVersion && p.version == selfVersion {
		p.cached, p.cachedApp, p.cachedSelf = q, appVersion, selfVersion
	}
	r.mu.Unlock()
	return q, nil
}
