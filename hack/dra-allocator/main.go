// Command dra-allocator runs kube-scheduler's DRA device allocator
// (k8s.io/dynamic-resource-allocation/structured, pinned with Kubernetes
// v1.37.2) for loadwise, which is written in Python and must give the same
// verdicts as kube-scheduler's DynamicResources plugin without re-implementing
// ~3000 lines of backtracking search and Kubernetes' CEL environment.
//
// Protocol: one JSON object per line on stdin, one answer per line on stdout,
// in order, each carrying the request's "id". Requests are handled one at a
// time, so a filter always sees every delta sent before it; a filter fans out
// over its nodes on all CPUs. See SPIKE.md for the message shapes.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// features are the allocator features kube-scheduler v1.37.2 enables by
// default (pkg/features/kube_features.go, mapped by AllocatorFeatures in
// dynamicresources.go). Alpha gates (derived attributes, compatibility groups,
// list-type attributes, optional node operations) stay off, as there. With
// these, structured.NewAllocator picks the "incubating" implementation, the
// same one kube-scheduler runs.
var features = structured.Features{
	AdminAccess:             true,
	PrioritizedList:         true,
	PartitionableDevices:    true,
	DeviceTaints:            true,
	DeviceBindingAndStatus:  true, // DRADeviceBindingConditions && DRAResourceClaimDeviceStatus
	ConsumableCapacity:      true,
	FractionalCapacityRange: true,
}

// defaultFilterTimeout is kube-scheduler's DynamicResourcesArgs.filterTimeout
// default (DRASchedulerFilterTimeout, beta and on in 1.37).
const defaultFilterTimeout = 10 * time.Second

type change struct {
	Op        string          `json:"op"` // "upsert" or "delete"
	Kind      string          `json:"kind"`
	Object    json.RawMessage `json:"object,omitempty"`
	Namespace string          `json:"namespace,omitempty"`
	Name      string          `json:"name,omitempty"`
}

type request struct {
	ID      int64    `json:"id"`
	Op      string   `json:"op"`
	Changes []change `json:"changes,omitempty"`
	// filter and rank: the pod's claims that still need an allocation
	// (kube-scheduler's claims.toAllocate()); allocated claims are checked
	// by their allocation's nodeSelector in loadwise.
	Claims   []*resourceapi.ResourceClaim   `json:"claims,omitempty"`
	Nodes    []string                       `json:"nodes,omitempty"`
	Node     string                         `json:"node,omitempty"`
	Inflight []resourceapi.AllocationResult `json:"inflight,omitempty"`
	// DeviceScores, "driver/pool/device" -> score, lower first: the
	// allocator is first-fit, so devices are offered to it coolest first.
	// Sent with op "scores" once per metrics interval (8000 devices are
	// ~250 KB of JSON: too much to resend with every pod); a filter or rank
	// may carry its own instead.
	DeviceScores map[string]float64 `json:"deviceScores,omitempty"`
	Limit        int                `json:"limit,omitempty"`
	// Compact: answer each node with its device names only; the full
	// AllocationResult of the node loadwise picks is then fetched with
	// {"op":"allocation","filterId":ID,"node":N}. A 1000-node answer
	// shrinks from 254 to 63 KiB and Python's decoding from 2.8 to 0.7 ms.
	Compact bool `json:"compact,omitempty"`
	// Lazy: answer each node with its device names and its allocations as one JSON string
	// (`raw`), which loadwise decodes only for the node it picks: decoding every node's
	// allocations as objects was a fifth of loadwise's CPU per device pod at 1000 nodes.
	Lazy bool `json:"lazy,omitempty"`
	// Memo: reuse a node's verdict while nothing it depends on changed (memo.go).
	Memo      bool  `json:"memo,omitempty"`
	FilterID  int64 `json:"filterId,omitempty"`
	TimeoutMs int   `json:"timeoutMs,omitempty"`
}

// nodeResult is the verdict for one node: allocations (one per claim, in the
// request's order) or kube-scheduler's reason (unschedulable on this node) or
// an error (kube-scheduler aborts the whole scheduling attempt on it).
type nodeResult struct {
	Allocations []resourceapi.AllocationResult `json:"allocations,omitempty"`
	Devices     [][]string                     `json:"devices,omitempty"` // compact: per claim, "driver/pool/device"
	Raw         string                         `json:"raw,omitempty"`     // lazy: the allocations, as JSON
	Reason      string                         `json:"reason,omitempty"`
	Error       string                         `json:"error,omitempty"`
}

type rankEntry struct {
	Allocations []resourceapi.AllocationResult `json:"allocations"`
	Devices     []string                       `json:"devices"`
}

type response struct {
	ID    int64                 `json:"id"`
	Error string                `json:"error,omitempty"`
	Nodes map[string]nodeResult `json:"nodes,omitempty"`
	Rank  []rankEntry           `json:"rank,omitempty"`
	Stats map[string]any        `json:"stats,omitempty"`
}

type helper struct {
	snap *snapshot
	// The same cache kube-scheduler keeps (10 compiled expressions, LRU). It
	// is safe for concurrent use by the per-node goroutines.
	celCache *cel.Cache
	workers  int
	// The last filter's full results, for the "allocation" op after a
	// compact filter. Only one is kept: loadwise schedules one pod at a time.
	lastID      int64
	lastResults map[string]nodeResult
	memo        map[string]memoEntry // by claims fingerprint + node name
	lastRuns    int                  // allocator runs of the last filter (stats, tests)
	scores      map[string]float64   // from op "scores"
	scoresGen   uint64               // bumped by op "scores" (memo.go)
}

func newHelper() *helper {
	return &helper{
		snap: newSnapshot(),
		celCache: cel.NewCache(10, cel.Features{
			EnableConsumableCapacity: features.ConsumableCapacity,
			EnableListTypeAttributes: features.ListTypeAttributes,
		}),
		workers: runtime.GOMAXPROCS(0),
		memo:    map[string]memoEntry{},
	}
}

func decodeObject(kind string, raw json.RawMessage) (any, error) {
	var obj any
	switch kind {
	case "ResourceSlice":
		obj = &resourceapi.ResourceSlice{}
	case "DeviceClass":
		obj = &resourceapi.DeviceClass{}
	case "ResourceClaim":
		obj = &resourceapi.ResourceClaim{}
	case "Node":
		obj = &v1.Node{}
	default:
		return nil, fmt.Errorf("unknown kind %q", kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	return obj, nil
}

func (h *helper) apply(changes []change) error {
	var errs []error
	for _, c := range changes {
		switch c.Op {
		case "upsert":
			obj, err := decodeObject(c.Kind, c.Object)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			h.snap.upsert(obj)
		case "delete":
			if err := h.snap.remove(c.Kind, c.Namespace, c.Name); err != nil {
				errs = append(errs, err)
			}
		default:
			errs = append(errs, fmt.Errorf("unknown change op %q", c.Op))
		}
	}
	// One bad object must not stop the others: report, keep going.
	return errors.Join(errs...)
}

// newAllocator mirrors DynamicResources.PreFilter: one allocator per pod over
// all slices and the allocated state including in-flight claims.
func (h *helper) newAllocator(ctx context.Context, nodes []string, inflight []resourceapi.AllocationResult, scores map[string]float64) (structured.Allocator, error) {
	slices := h.snap.allSlices()
	if len(scores) > 0 {
		slices = orderByScore(slices, h.snap.slicesByNode, nodes, scores)
	}
	return structured.NewAllocator(ctx, features, h.snap.state(inflight), classLister{h.snap}, slices, h.celCache)
}

// allocateOn mirrors DynamicResources.Filter's use of the allocator, with its
// reason strings.
func (h *helper) allocateOn(ctx context.Context, a structured.Allocator, nodeName string, claims []*resourceapi.ResourceClaim, timeout time.Duration) nodeResult {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := a.Allocate(actx, h.snap.node(nodeName), claims)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nodeResult{Error: fmt.Sprintf("node %s: timed out trying to allocate devices", nodeName)}
	case errors.Is(err, structured.ErrFailedAllocationOnNode):
		return nodeResult{Reason: err.Error()}
	case err != nil:
		return nodeResult{Error: err.Error()}
	case len(res) != len(claims):
		return nodeResult{Reason: "cannot allocate all claims"}
	}
	return nodeResult{Allocations: res}
}

func (h *helper) filter(ctx context.Context, req *request) response {
	scores, scoresGen := req.DeviceScores, ""
	if scores == nil {
		scores, scoresGen = h.scores, "s"+strconv.FormatUint(h.scoresGen, 36)
	}
	timeout := defaultFilterTimeout
	if req.TimeoutMs > 0 {
		timeout = time.Duration(req.TimeoutMs) * time.Millisecond
	}
	results := make([]nodeResult, len(req.Nodes))
	todo := make([]int, 0, len(req.Nodes)) // indexes of nodes to run the allocator on
	var keys []string
	var fp string
	if req.Memo {
		var byPool map[string][]string
		fp, byPool = claimsFingerprint(req.Claims), inflightByPool(req.Inflight)
		keys = make([]string, len(req.Nodes))
		for i, n := range req.Nodes {
			keys[i] = h.snap.memoKey(fp, n, byPool, scores, scoresGen)
			if e, ok := h.memo[fp+n]; ok && e.key == keys[i] {
				results[i] = e.result
				continue
			}
			todo = append(todo, i)
		}
	} else {
		for i := range req.Nodes {
			todo = append(todo, i)
		}
	}
	h.lastRuns = len(todo)
	if len(todo) > 0 {
		// Only the nodes to compute get score-ordered slice copies.
		names := make([]string, len(todo))
		for j, i := range todo {
			names[j] = req.Nodes[i]
		}
		a, err := h.newAllocator(ctx, names, req.Inflight, scores)
		if err != nil {
			return response{ID: req.ID, Error: err.Error()}
		}
		// Like kube-scheduler's parallelizer: nodes are independent, Allocate
		// is thread-safe, and the snapshot does not change during a request.
		var wg sync.WaitGroup
		next := make(chan int)
		for w := 0; w < min(h.workers, len(todo)); w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range next {
					results[i] = h.allocateOn(ctx, a, req.Nodes[i], req.Claims, timeout)
				}
			}()
		}
		for _, i := range todo {
			next <- i
		}
		close(next)
		wg.Wait()
		if req.Memo {
			if len(h.memo)+len(todo) > memoMaxEntries {
				clear(h.memo) // crude bound; a template mix larger than this recomputes
			}
			for _, i := range todo {
				if results[i].Error == "" { // errors and timeouts are retried, never memoised
					h.memo[fp+req.Nodes[i]] = memoEntry{keys[i], results[i]}
				}
			}
		}
	}
	out := response{ID: req.ID, Nodes: make(map[string]nodeResult, len(req.Nodes))}
	for i, n := range req.Nodes {
		out.Nodes[n] = results[i]
	}
	if req.Lazy {
		lazy := make(map[string]nodeResult, len(out.Nodes))
		for n, r := range out.Nodes {
			l := nodeResult{Reason: r.Reason, Error: r.Error}
			if r.Allocations != nil {
				raw, err := json.Marshal(r.Allocations)
				if err != nil {
					return response{ID: req.ID, Error: err.Error()}
				}
				l.Raw = string(raw)
				for _, al := range r.Allocations {
					l.Devices = append(l.Devices, devicesOf(al))
				}
			}
			lazy[n] = l
		}
		out.Nodes = lazy
	} else if req.Compact {
		h.lastID, h.lastResults = req.ID, out.Nodes
		compact := make(map[string]nodeResult, len(out.Nodes))
		for n, r := range out.Nodes {
			c := nodeResult{Reason: r.Reason, Error: r.Error}
			for _, al := range r.Allocations {
				c.Devices = append(c.Devices, devicesOf(al))
			}
			compact[n] = c
		}
		out.Nodes = compact
	}
	return out
}

func devicesOf(al resourceapi.AllocationResult) []string {
	out := make([]string, 0, len(al.Devices.Results))
	for _, d := range al.Devices.Results {
		out = append(out, deviceKey(d.Driver, d.Pool, d.Device))
	}
	return out
}

func (h *helper) allocation(req *request) response {
	r, ok := h.lastResults[req.Node]
	if req.FilterID != h.lastID || !ok {
		return response{ID: req.ID, Error: fmt.Sprintf("no result of filter %d for node %q (only the last filter is kept)", req.FilterID, req.Node)}
	}
	return response{ID: req.ID, Nodes: map[string]nodeResult{req.Node: r}}
}

// rank lists, coolest first, the allocations the upstream allocator would
// make on one node: each round offers devices in score order and then treats
// the devices just chosen as in flight, so the next round finds the next
// coolest feasible choice. Every entry is an allocation the allocator itself
// produced (CEL, taints, counters, constraints all checked), which is what
// `loadwise explain` needs to say why a device was or was not chosen.
func (h *helper) rank(ctx context.Context, req *request) response {
	scores := req.DeviceScores
	if scores == nil {
		scores = h.scores
	}
	limit := req.Limit
	if limit <= 0 {
		limit = 8
	}
	inflight := append([]resourceapi.AllocationResult(nil), req.Inflight...)
	out := response{ID: req.ID}
	for len(out.Rank) < limit {
		a, err := h.newAllocator(ctx, []string{req.Node}, inflight, scores)
		if err != nil {
			return response{ID: req.ID, Error: err.Error()}
		}
		r := h.allocateOn(ctx, a, req.Node, req.Claims, defaultFilterTimeout)
		if r.Error != "" {
			out.Error = r.Error
		}
		if r.Allocations == nil {
			break
		}
		e := rankEntry{Allocations: r.Allocations}
		for _, al := range r.Allocations {
			e.Devices = append(e.Devices, devicesOf(al)...)
		}
		out.Rank = append(out.Rank, e)
		inflight = append(inflight, r.Allocations...)
	}
	return out
}

func (h *helper) stats(id int64) response {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := ""
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
	}
	devices := 0
	for _, s := range h.snap.slices {
		devices += len(s.Spec.Devices)
	}
	return response{ID: id, Stats: map[string]any{
		"slices": len(h.snap.slices), "devices": devices, "classes": len(h.snap.classes),
		"allocatedClaims": len(h.snap.claims), "nodes": len(h.snap.nodes),
		"heapAlloc": ms.HeapAlloc, "sys": ms.Sys, "rss": rss,
	}}
}

func (h *helper) handle(ctx context.Context, line []byte) response {
	var req request
	if err := json.Unmarshal(line, &req); err != nil {
		return response{ID: req.ID, Error: "bad request: " + err.Error()}
	}
	switch req.Op {
	case "apply":
		if err := h.apply(req.Changes); err != nil {
			return response{ID: req.ID, Error: err.Error()}
		}
		return response{ID: req.ID}
	case "reset": // after a relist: loadwise resends everything
		h.snap = newSnapshot()
		h.memo = map[string]memoEntry{} // versions restart at zero
		return response{ID: req.ID}
	case "scores": // replaces all scores; {} clears them (first fit, as upstream)
		h.scores = req.DeviceScores
		h.scoresGen++
		return response{ID: req.ID}
	case "filter":
		return h.filter(ctx, &req)
	case "allocation":
		return h.allocation(&req)
	case "rank":
		return h.rank(ctx, &req)
	case "stats":
		return h.stats(req.ID)
	case "ping":
		return response{ID: req.ID}
	}
	return response{ID: req.ID, Error: fmt.Sprintf("unknown op %q", req.Op)}
}

func serve(ctx context.Context, in io.Reader, out io.Writer) error {
	h := newHelper()
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriterSize(out, 1<<20)
	enc := json.NewEncoder(w)
	for {
		line, err := r.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			if e := enc.Encode(h.handle(ctx, line)); e != nil {
				return e
			}
			if e := w.Flush(); e != nil {
				return e
			}
		}
		if err == io.EOF {
			return nil // loadwise closed our stdin: exit quietly
		}
		if err != nil {
			return err
		}
	}
}

func main() {
	if err := serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "dra-allocator:", err)
		os.Exit(1)
	}
}
