package main

// Steering the first-fit allocator towards cool devices without forking it.
//
// The upstream allocator has no device score (enhancements#4970 is open). It
// walks pools sorted by (driver, pool name), the slices of a pool sorted by
// slice name (GatherPools/buildPool, "so driver authors can influence
// prioritization through their naming conventions"), and the devices of a
// slice in their listed order, and takes the first full solution of its
// backtracking search. Device identity in a result is (driver, pool, device
// name), never a position or a slice name. So for one call we hand it copies
// of the candidate nodes' slices whose devices are sorted by score and, when a
// pool has several slices on the node, whose names sort in the order of their
// best device. Feasibility is unchanged (the search is exhaustive); only which
// feasible devices are found first changes. What cannot be steered: the order
// of pools (driver and pool names are part of the result), and a global order
// across the slices of one pool (a device stays in its slice).

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
)

func deviceScore(scores map[string]float64, s *resourceapi.ResourceSlice, d *resourceapi.Device) float64 {
	if v, ok := scores[deviceKey(s.Spec.Driver, s.Spec.Pool.Name, d.Name)]; ok {
		return v
	}
	// No metric: after every measured device, in the driver's order. loadwise
	// decides what a missing sample means by the score it sends.
	return math.Inf(1)
}

// orderByScore returns all slices with the candidate nodes' (and the
// node-independent) slices replaced by score-ordered copies. The snapshot's
// objects are never modified: other calls and the informer view share them.
func orderByScore(all []*resourceapi.ResourceSlice, byNode map[string][]*resourceapi.ResourceSlice, nodes []string, scores map[string]float64) []*resourceapi.ResourceSlice {
	repl := map[*resourceapi.ResourceSlice]*resourceapi.ResourceSlice{}
	reorderGroup := func(group []*resourceapi.ResourceSlice) {
		type ranked struct {
			orig, copy *resourceapi.ResourceSlice
			best       float64
		}
		perPool := map[string][]ranked{}
		for _, s := range group {
			if len(s.Spec.Devices) == 0 {
				continue // counter-only slices (partitionable devices) have nothing to order
			}
			c := *s // shallow: only Spec.Devices and Name are replaced
			c.Spec.Devices = slices.Clone(s.Spec.Devices)
			slices.SortStableFunc(c.Spec.Devices, func(a, b resourceapi.Device) int {
				return cmp.Compare(deviceScore(scores, s, &a), deviceScore(scores, s, &b))
			})
			best := deviceScore(scores, s, &c.Spec.Devices[0])
			key := s.Spec.Driver + "/" + s.Spec.Pool.Name
			perPool[key] = append(perPool[key], ranked{s, &c, best})
		}
		for _, rs := range perPool {
			if len(rs) > 1 {
				// Slice names decide the order within a pool: prefix the
				// copies' names so the slice holding the coolest device
				// comes first. Ties keep the upstream order (by name).
				slices.SortStableFunc(rs, func(a, b ranked) int {
					if c := cmp.Compare(a.best, b.best); c != 0 {
						return c
					}
					return cmp.Compare(a.orig.Name, b.orig.Name)
				})
				for i := range rs {
					rs[i].copy.Name = fmt.Sprintf("%06d-%s", i, rs[i].orig.Name)
				}
			}
			for _, r := range rs {
				repl[r.orig] = r.copy
			}
		}
	}
	for _, n := range nodes {
		reorderGroup(byNode[n])
	}
	// Slices with nodeSelector/allNodes/perDeviceNodeSelection (no nodeName).
	reorderGroup(byNode[""])
	if len(repl) == 0 {
		return all
	}
	out := make([]*resourceapi.ResourceSlice, len(all))
	for i, s := range all {
		if c, ok := repl[s]; ok {
			out[i] = c
		} else {
			out[i] = s
		}
	}
	return out
}
