package main

// Per-node memo of filter verdicts.
//
// kube-scheduler runs the allocator for every (pod, node) and so did the first
// version of this helper: ~40 us per node here, 40-60 ms per pod at 1000
// nodes. But pods of one template send the same claim spec, and a node's
// verdict can only change when something the allocator reads for that node
// changes: its slices, its labels, the classes, the allocated or in-flight
// devices of its pools, the node-independent slices, or the scores of its
// devices. The memo keys each node's last verdict by exactly those, so a
// repeated filter re-runs the allocator only on nodes whose inputs changed.
// It is an optimisation only: with "memo": false the helper is the plain
// upstream loop, and the test checks both agree.

import (
	"encoding/json"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

type versions struct {
	classes uint64
	node    map[string]uint64 // slices with that nodeName, or "" for node-independent slices; node labels
	pool    map[string]uint64 // "driver/pool": its slices or its allocated devices changed
}

// touchSlice: the slice's node and its pool changed. The pool matters for
// other nodes too: the allocator checks a pool's completeness (and, with
// "All", counts its devices) over the slices of every node.
func (v *versions) touchSlice(s *resourceapi.ResourceSlice) {
	v.node[ptr.Deref(s.Spec.NodeName, "")]++
	v.pool[s.Spec.Driver+"/"+s.Spec.Pool.Name]++
}

func (v *versions) touchPools(a *resourceapi.AllocationResult) {
	if a == nil {
		return
	}
	for _, r := range a.Devices.Results {
		v.pool[r.Driver+"/"+r.Pool]++
	}
}

// memoMaxEntries bounds the memo: 1000 nodes x ~100 claim specs in use.
const memoMaxEntries = 100_000

type memoEntry struct {
	key    string
	result nodeResult
}

// claimsFingerprint covers what the allocator reads from the claims for a
// result: their specs (claims being allocated have no status). Claim names
// only appear in fatal errors, which are never memoised, so the pods of one
// template share entries.
func claimsFingerprint(claims []*resourceapi.ResourceClaim) string {
	h := fnv.New128a()
	for _, c := range claims {
		b, _ := json.Marshal(&c.Spec) // deterministic: struct fields in order, map keys sorted
		h.Write(b)
		h.Write([]byte{0})
	}
	return string(h.Sum(nil))
}

// memoKey builds the key of one node. byPool maps "driver/pool" to the
// in-flight device keys of that pool (precomputed once per filter call).
// Scores set with op "scores" count by their generation (scoresGen, not
// empty): a new scrape recomputes every node once (~50 ms per 1000 nodes),
// which is cheaper than formatting 8000 scores into keys for every pod.
// Scores sent with the request itself count by value.
func (s *snapshot) memoKey(claimsFP, node string, byPool map[string][]string, scores map[string]float64, scoresGen string) string {
	var b strings.Builder
	b.WriteString(claimsFP)
	b.WriteString(scoresGen)
	if scoresGen != "" {
		scores = nil
	}
	b.WriteString(strconv.FormatUint(s.ver.classes, 36))
	b.WriteByte('|')
	b.WriteString(strconv.FormatUint(s.ver.node[node], 36))
	b.WriteByte('|')
	b.WriteString(strconv.FormatUint(s.ver.node[""], 36))
	for _, group := range [][]*resourceapi.ResourceSlice{s.slicesByNode[node], s.slicesByNode[""]} {
		for _, sl := range group {
			pool := sl.Spec.Driver + "/" + sl.Spec.Pool.Name
			b.WriteByte('|')
			b.WriteString(pool)
			b.WriteByte('=')
			b.WriteString(strconv.FormatUint(s.ver.pool[pool], 36))
			for _, d := range byPool[pool] {
				b.WriteByte(',')
				b.WriteString(d)
			}
			if len(scores) > 0 {
				for i := range sl.Spec.Devices {
					if v, ok := scores[deviceKey(sl.Spec.Driver, sl.Spec.Pool.Name, sl.Spec.Devices[i].Name)]; ok {
						b.WriteByte(';')
						b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
					} else {
						b.WriteString(";-")
					}
				}
			}
		}
	}
	return b.String()
}

func inflightByPool(inflight []resourceapi.AllocationResult) map[string][]string {
	out := map[string][]string{}
	for i := range inflight {
		for _, r := range inflight[i].Devices.Results {
			p := r.Driver + "/" + r.Pool
			d := r.Device
			if r.ShareID != nil {
				d += "#" + string(*r.ShareID) // consumed capacity changes with each share
			}
			out[p] = append(out[p], d)
		}
	}
	for p := range out {
		slices.Sort(out[p])
	}
	return out
}
