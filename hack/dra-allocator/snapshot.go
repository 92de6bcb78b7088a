package main

// The snapshot is the helper's copy of the cluster objects the allocator needs.
// loadwise owns the informers and tells the helper about changes as deltas, so
// a filter call carries only the pod's claims and the candidate node names.

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

type snapshot struct {
	slices  map[string]*resourceapi.ResourceSlice // by name (cluster-scoped)
	classes map[string]*resourceapi.DeviceClass   // by name (cluster-scoped)
	nodes   map[string]*v1.Node                   // by name; only labels matter (slice nodeSelector)
	claims  map[string]*resourceapi.ResourceClaim // by namespace/name; only allocated ones are kept

	// sliceList is rebuilt lazily after a slice delta; NewAllocator wants a slice
	// and rebuilding it per filter call would cost O(slices) allocations.
	sliceList  []*resourceapi.ResourceSlice
	sliceDirty bool
	// slicesByNode lets the score ordering touch only the candidate nodes' slices.
	slicesByNode map[string][]*resourceapi.ResourceSlice

	// Allocated devices of all claims with status.allocation, kept
	// incrementally like kube-scheduler's allocatedDevices (allocateddevices.go)
	// instead of walking every claim on every call.
	allocated allocState

	// Change counters for the per-node result memo (memo.go).
	ver versions
}

// allocState mirrors structured.AllocatedState with reference counts: the
// same dedicated device must never be in two claims, but when that invariant
// is broken (two schedulers, issue 50 item 3) a delete must not free a device
// that another claim still holds.
type allocState struct {
	ids      map[structured.DeviceID]int
	shareIDs map[structured.SharedDeviceID]int
	capacity structured.ConsumedCapacityCollection
}

func newSnapshot() *snapshot {
	return &snapshot{
		slices:       map[string]*resourceapi.ResourceSlice{},
		classes:      map[string]*resourceapi.DeviceClass{},
		nodes:        map[string]*v1.Node{},
		claims:       map[string]*resourceapi.ResourceClaim{},
		slicesByNode: map[string][]*resourceapi.ResourceSlice{},
		ver:          versions{node: map[string]uint64{}, pool: map[string]uint64{}},
		allocated: allocState{
			ids:      map[structured.DeviceID]int{},
			shareIDs: map[structured.SharedDeviceID]int{},
			capacity: structured.NewConsumedCapacityCollection(),
		},
	}
}

// forEachAllocatedDevice is kube-scheduler's foreachAllocatedDevice
// (allocateddevices.go) with consumable capacity on, as in 1.37: admin-access
// results do not count, shared results count by share ID and capacity.
func forEachAllocatedDevice(a *resourceapi.AllocationResult,
	dedicated func(structured.DeviceID),
	shared func(structured.SharedDeviceID),
	capacity func(structured.DeviceConsumedCapacity)) {
	if a == nil {
		return
	}
	for _, r := range a.Devices.Results {
		if ptr.Deref(r.AdminAccess, false) {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID != nil {
			shared(structured.MakeSharedDeviceID(id, r.ShareID))
			if r.ConsumedCapacity != nil {
				capacity(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
			}
			continue
		}
		dedicated(id)
	}
}

func (s *allocState) add(a *resourceapi.AllocationResult, sign int) {
	forEachAllocatedDevice(a,
		func(id structured.DeviceID) {
			s.ids[id] += sign
			if s.ids[id] <= 0 {
				delete(s.ids, id)
			}
		},
		func(id structured.SharedDeviceID) {
			s.shareIDs[id] += sign
			if s.shareIDs[id] <= 0 {
				delete(s.shareIDs, id)
			}
		},
		func(c structured.DeviceConsumedCapacity) {
			if sign > 0 {
				s.capacity.Insert(c)
			} else {
				s.capacity.Remove(c)
			}
		})
}

// state returns the structured.AllocatedState for one filter call: the
// informer view plus in-flight allocations (reserved by loadwise, not yet
// written), as GatherAllocatedState does. The maps are fresh because the
// in-flight ones must not leak into the snapshot.
func (s *snapshot) state(inflight []resourceapi.AllocationResult) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       s.allocated.capacity.Clone(),
	}
	for id := range s.allocated.ids {
		st.AllocatedDevices.Insert(id)
	}
	for id := range s.allocated.shareIDs {
		st.AllocatedSharedDeviceIDs.Insert(id)
	}
	for i := range inflight {
		forEachAllocatedDevice(&inflight[i],
			func(id structured.DeviceID) { st.AllocatedDevices.Insert(id) },
			func(id structured.SharedDeviceID) { st.AllocatedSharedDeviceIDs.Insert(id) },
			func(c structured.DeviceConsumedCapacity) { st.AggregatedCapacity.Insert(c) })
	}
	return st
}

func (s *snapshot) allSlices() []*resourceapi.ResourceSlice {
	if s.sliceDirty || s.sliceList == nil {
		s.sliceList = make([]*resourceapi.ResourceSlice, 0, len(s.slices))
		for _, sl := range s.slices {
			s.sliceList = append(s.sliceList, sl)
		}
		s.sliceDirty = false
	}
	return s.sliceList
}

func claimKey(c *resourceapi.ResourceClaim) string { return c.Namespace + "/" + c.Name }

func (s *snapshot) unindexSlice(old *resourceapi.ResourceSlice) {
	if old == nil {
		return
	}
	n := ptr.Deref(old.Spec.NodeName, "")
	s.slicesByNode[n] = slices.DeleteFunc(s.slicesByNode[n], func(x *resourceapi.ResourceSlice) bool { return x == old })
	if len(s.slicesByNode[n]) == 0 {
		delete(s.slicesByNode, n)
	}
}

// upsert stores one object decoded from the API server's JSON.
func (s *snapshot) upsert(obj any) {
	switch o := obj.(type) {
	case *resourceapi.ResourceSlice:
		if old := s.slices[o.Name]; old != nil {
			s.ver.touchSlice(old) // a slice may move between nodes or pools
		}
		s.ver.touchSlice(o)
		s.unindexSlice(s.slices[o.Name])
		s.slices[o.Name] = o
		n := ptr.Deref(o.Spec.NodeName, "")
		s.slicesByNode[n] = append(s.slicesByNode[n], o)
		s.sliceDirty = true
	case *resourceapi.DeviceClass:
		s.classes[o.Name] = o
		s.ver.classes++
	case *v1.Node:
		s.nodes[o.Name] = o
		s.ver.node[o.Name]++
	case *resourceapi.ResourceClaim:
		k := claimKey(o)
		if old := s.claims[k]; old != nil {
			s.allocated.add(old.Status.Allocation, -1)
			s.ver.touchPools(old.Status.Allocation)
			delete(s.claims, k)
		}
		// Unallocated claims do not hold devices; the caller sends the pod's
		// claims with each filter call, so there is no need to keep them.
		if o.Status.Allocation != nil {
			s.claims[k] = o
			s.allocated.add(o.Status.Allocation, +1)
			s.ver.touchPools(o.Status.Allocation)
		}
	}
}

func (s *snapshot) remove(kind, namespace, name string) error {
	switch kind {
	case "ResourceSlice":
		if old := s.slices[name]; old != nil {
			s.ver.touchSlice(old)
		}
		s.unindexSlice(s.slices[name])
		delete(s.slices, name)
		s.sliceDirty = true
	case "DeviceClass":
		delete(s.classes, name)
		s.ver.classes++
	case "Node":
		delete(s.nodes, name)
		s.ver.node[name]++
	case "ResourceClaim":
		k := namespace + "/" + name
		if old := s.claims[k]; old != nil {
			s.allocated.add(old.Status.Allocation, -1)
			s.ver.touchPools(old.Status.Allocation)
			delete(s.claims, k)
		}
	default:
		return fmt.Errorf("unknown kind %q", kind)
	}
	return nil
}

// node returns the Node the allocator matches slices against. Only the name
// and labels matter; a node loadwise did not send gets a bare object so that
// slices with spec.nodeName still work.
func (s *snapshot) node(name string) *v1.Node {
	if n := s.nodes[name]; n != nil {
		return n
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// classLister implements structured.DeviceClassLister over the snapshot.
// A missing class is a fatal allocator error; kube-scheduler catches it
// earlier, in PreFilter ("device class X does not exist", unschedulable), and
// loadwise's PreFilter must do the same before calling filter.
type classLister struct{ s *snapshot }

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l.s.classes))
	for _, c := range l.s.classes {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c := l.s.classes[name]; c != nil {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

func deviceKey(driver, pool, device string) string {
	return strings.Join([]string{driver, pool, device}, "/")
}
