package main

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"
)

const driver = "gpu.example.com"

// The fleet of the spike: per node one slice of 8 GPUs with a few attributes;
// devices 0-1 are h100, 2-7 a100, so the class selector rejects two devices
// before first-fit finds one.
func nodeSlice(node string) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   driver,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
	for i := 0; i < 8; i++ {
		model := "a100"
		if i < 2 {
			model = "h100"
		}
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"model":         {StringValue: ptr.To(model)},
				"index":         {IntValue: ptr.To(int64(i))},
				"driverVersion": {VersionValue: ptr.To("550.54.15")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("80Gi")},
			},
		})
	}
	return s
}

func gpuClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: "a100"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: `device.driver == "gpu.example.com" && device.attributes["gpu.example.com"].model == "a100"`,
		}}}},
	}
}

func oneGPUClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name:    "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "a100", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1},
		}}}},
	}
}

func fleet(nodes int) (*helper, []string) {
	h := newHelper()
	h.snap.upsert(gpuClass())
	names := make([]string, nodes)
	for i := range names {
		names[i] = fmt.Sprintf("node-%05d", i)
		h.snap.upsert(nodeSlice(names[i]))
	}
	return h, names
}

func chosen(t *testing.T, r nodeResult) string {
	t.Helper()
	if len(r.Allocations) != 1 || len(r.Allocations[0].Devices.Results) != 1 {
		t.Fatalf("want one device, got %+v", r)
	}
	return r.Allocations[0].Devices.Results[0].Device
}

func TestFilterFirstFitScoresInflightAndAllocated(t *testing.T) {
	ctx := context.Background()
	h, nodes := fleet(2)
	claim := oneGPUClaim("c1")
	r := h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes})
	if got := chosen(t, r.Nodes[nodes[0]]); got != "gpu-2" {
		t.Fatalf("first fit: want gpu-2 (first a100), got %s", got)
	}
	// Coolest feasible: gpu-1 is coolest but h100, so gpu-6 wins.
	scores := map[string]float64{}
	for i := 0; i < 8; i++ {
		scores[deviceKey(driver, nodes[0], fmt.Sprintf("gpu-%d", i))] = float64(90 - 10*i)
	}
	scores[deviceKey(driver, nodes[0], "gpu-7")] = 95
	r = h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes, DeviceScores: scores})
	if got := chosen(t, r.Nodes[nodes[0]]); got != "gpu-6" {
		t.Fatalf("scored: want gpu-6, got %s", got)
	}
	// The snapshot's slice was not reordered by the scored call.
	if h.snap.slices[nodes[0]+"-gpus"].Spec.Devices[0].Name != "gpu-0" {
		t.Fatal("snapshot slice modified")
	}
	// In flight gpu-6 -> next coolest a100 is gpu-5.
	inflight := r.Nodes[nodes[0]].Allocations
	r = h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes, DeviceScores: scores, Inflight: inflight})
	if got := chosen(t, r.Nodes[nodes[0]]); got != "gpu-5" {
		t.Fatalf("inflight: want gpu-5, got %s", got)
	}
	// Rank lists all six a100s coolest first, then stops.
	rk := h.rank(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Node: nodes[0], DeviceScores: scores, Limit: 10})
	var order []string
	for _, e := range rk.Rank {
		order = append(order, e.Devices...)
	}
	want := fmt.Sprint([]string{"gpu.example.com/node-00000/gpu-6", "gpu.example.com/node-00000/gpu-5", "gpu.example.com/node-00000/gpu-4", "gpu.example.com/node-00000/gpu-3", "gpu.example.com/node-00000/gpu-2", "gpu.example.com/node-00000/gpu-7"})
	if fmt.Sprint(order) != want {
		t.Fatalf("rank: got %v", order)
	}
	// All six a100s of node 1 allocated by claims -> kube-scheduler's reason.
	for i := 2; i < 8; i++ {
		c := oneGPUClaim(fmt.Sprintf("held-%d", i))
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: driver, Pool: nodes[1], Device: fmt.Sprintf("gpu-%d", i),
		}}}}
		h.snap.upsert(c)
	}
	r = h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes})
	if got := r.Nodes[nodes[1]]; got.Reason != "cannot allocate all claims" {
		t.Fatalf("full node: got %+v", got)
	}
	if err := h.snap.remove("ResourceClaim", "default", "held-4"); err != nil {
		t.Fatal(err)
	}
	r = h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes})
	if got := chosen(t, r.Nodes[nodes[1]]); got != "gpu-4" {
		t.Fatalf("after delete: want gpu-4, got %s", got)
	}
	// A selector that does not compile is an error, as in kube-scheduler.
	bad := gpuClass()
	bad.Spec.Selectors[0].CEL.Expression = `device.attributes["gpu.example.com"].model ==`
	h.snap.upsert(bad)
	r = h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: nodes[:1]})
	if r.Nodes[nodes[0]].Error == "" {
		t.Fatalf("bad CEL: want error, got %+v", r.Nodes[nodes[0]])
	}
	t.Logf("bad CEL error: %s", r.Nodes[nodes[0]].Error)
}

// One (claim, node) Allocate: what kube-scheduler's Filter costs per node.
func BenchmarkAllocateOneNode(b *testing.B) {
	ctx := context.Background()
	h, nodes := fleet(1000)
	a, err := h.newAllocator(ctx, nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	claims := []*resourceapi.ResourceClaim{oneGPUClaim("c")}
	node := h.snap.node(nodes[500])
	b.ResetTimer()
	for b.Loop() {
		if res, err := a.Allocate(ctx, node, claims); err != nil || len(res) != 1 {
			b.Fatal(err, res)
		}
	}
}

// One pod over 1000 nodes: NewAllocator (PreFilter) + Allocate per node on all
// CPUs (Filter), as the helper's filter op does it, without the JSON.
func BenchmarkFilter1000Nodes(b *testing.B) {
	benchFilter(b, 1000, false)
}

func BenchmarkFilter1000NodesScored(b *testing.B) {
	benchFilter(b, 1000, true)
}

func BenchmarkFilter5000Nodes(b *testing.B) {
	benchFilter(b, 5000, false)
}

func benchFilter(b *testing.B, n int, scored bool) {
	ctx := context.Background()
	h, nodes := fleet(n)
	req := &request{Claims: []*resourceapi.ResourceClaim{oneGPUClaim("c")}, Nodes: nodes}
	if scored {
		req.DeviceScores = map[string]float64{}
		for i, node := range nodes {
			for d := 0; d < 8; d++ {
				req.DeviceScores[deviceKey(driver, node, fmt.Sprintf("gpu-%d", d))] = float64((i*7 + d*13) % 100)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		r := h.filter(ctx, req)
		if r.Error != "" || len(r.Nodes) != n || r.Nodes[nodes[0]].Allocations == nil {
			b.Fatal(r.Error)
		}
	}
}

// CEL alone, for comparison with Python CEL packages: the class selector and
// Kubernetes-only functions on one device, through the helper's cache.
func BenchmarkCEL(b *testing.B) {
	h := newHelper()
	d := nodeSlice("n").Spec.Devices[3]
	dev := cel.Device{Driver: driver, Attributes: d.Attributes, Capacity: d.Capacity}
	for name, expr := range map[string]string{
		"driverModel":  gpuClass().Spec.Selectors[0].CEL.Expression,
		"quantity":     `device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) >= 0`,
		"semver":       `device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("550.0.0"))`,
		"bindOptional": `cel.bind(a, device.attributes["gpu.example.com"], a.?model.orValue("") == "a100" && a.index < 4)`,
	} {
		b.Run(name, func(b *testing.B) {
			c := h.celCache.GetOrCompile(expr)
			if c.Error != nil {
				b.Fatal(c.Error)
			}
			for b.Loop() {
				if ok, _, err := c.DeviceMatches(context.Background(), dev); !ok || err != nil {
					b.Fatal(ok, err)
				}
			}
		})
	}
}

// The memo must never change a verdict: replay a sequence of deltas, scores
// and in-flight allocations and compare every node with a memo-less call.
func TestMemoAgreesWithPlainAllocator(t *testing.T) {
	// Scores sent with each request (keyed by value), or with op "scores"
	// (keyed by generation); each time with full and compact answers.
	for _, opScores := range []bool{false, true} {
		t.Run(fmt.Sprintf("opScores=%v", opScores), func(t *testing.T) { testMemo(t, opScores) })
	}
}

func testMemo(t *testing.T, opScores bool) {
	ctx := context.Background()
	h, nodes := fleet(20)
	claim := oneGPUClaim("c")
	two := oneGPUClaim("two")
	two.Spec.Devices.Requests[0].Exactly.Count = 2
	scores := map[string]float64{}
	var inflight []resourceapi.AllocationResult
	hits := 0
	check := func(step string, claims ...*resourceapi.ResourceClaim) {
		t.Helper()
		for _, compact := range []bool{false, true} {
			req := &request{Claims: claims, Nodes: nodes, DeviceScores: scores, Inflight: inflight, Compact: compact}
			if opScores {
				req.DeviceScores = nil
			}
			plain := h.filter(ctx, req)
			req.Memo = true
			if opScores {
				req.DeviceScores = nil
			}
			memo := h.filter(ctx, req)
			a, _ := json.Marshal(plain.Nodes)
			b, _ := json.Marshal(memo.Nodes)
			if string(a) != string(b) {
				t.Fatalf("%s: memo differs\nplain %s\nmemo  %s", step, a, b)
			}
			hits += len(req.Nodes) - h.lastRuns
		}
	}
	check("cold", claim)
	check("warm", claim)
	check("other spec", two)
	for step := 0; step < 40; step++ {
		n := nodes[step%len(nodes)]
		switch step % 5 {
		case 0: // an allocated claim appears
			c := oneGPUClaim(fmt.Sprintf("held-%d", step))
			c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: driver, Pool: n, Device: fmt.Sprintf("gpu-%d", 2+step%6),
			}}}}
			h.snap.upsert(c)
		case 1: // scores move
			scores[deviceKey(driver, n, fmt.Sprintf("gpu-%d", step%8))] = float64(step)
			b, _ := json.Marshal(map[string]any{"op": "scores", "deviceScores": scores})
			h.handle(ctx, b)
		case 2: // a pod reserved, not yet written
			r := h.filter(ctx, &request{Claims: []*resourceapi.ResourceClaim{claim}, Nodes: []string{n}, Inflight: inflight})
			inflight = append(inflight, r.Nodes[n].Allocations...)
		case 3: // a slice is republished without its last a100
			s := nodeSlice(n)
			s.Spec.Devices = s.Spec.Devices[:7-step%3]
			h.snap.upsert(s)
		case 4: // a claim is freed, the class changes
			_ = h.snap.remove("ResourceClaim", "default", fmt.Sprintf("held-%d", step-4))
			cl := gpuClass()
			if step%10 == 4 {
				cl.Spec.Selectors[0].CEL.Expression = `device.attributes["gpu.example.com"].index >= 1`
			}
			h.snap.upsert(cl)
		}
		check(fmt.Sprintf("step %d", step), claim)
		check(fmt.Sprintf("step %d two", step), two)
	}
	// A pool whose two slices sit on two nodes: deleting the slice on node 1
	// makes the pool incomplete, which changes node 0's verdict too.
	b200 := gpuClass()
	b200.Name = "b200"
	b200.Spec.Selectors[0].CEL.Expression = `device.attributes["gpu.example.com"].model == "b200"`
	h.snap.upsert(b200)
	wantB200 := oneGPUClaim("b")
	wantB200.Spec.Devices.Requests[0].Exactly.DeviceClassName = "b200"
	for i, n := range nodes[:2] {
		sl := nodeSlice(n)
		sl.Name = fmt.Sprintf("span-%d", i)
		sl.Spec.Pool = resourceapi.ResourcePool{Name: "span", Generation: 1, ResourceSliceCount: 2}
		for d := range sl.Spec.Devices {
			sl.Spec.Devices[d].Name = fmt.Sprintf("b200-%d-%d", i, d)
			sl.Spec.Devices[d].Attributes["model"] = resourceapi.DeviceAttribute{StringValue: ptr.To("b200")}
		}
		h.snap.upsert(sl)
	}
	check("spanning pool", wantB200)
	if err := h.snap.remove("ResourceSlice", "", "span-1"); err != nil {
		t.Fatal(err)
	}
	check("spanning pool incomplete", wantB200)
	if hits < 20*80 {
		t.Fatalf("memo hardly used: %d hits", hits)
	}
	t.Logf("memo hits: %d of %d node verdicts", hits, 20*(3+80)*2)
}

// The memo in loadwise's steady state, one template's pods in a row with
// device scores: after the first pod only the nodes whose in-flight devices
// changed (the last pod's node, and the one whose reservation left the
// window of 64 binds in flight) run the allocator again.
func BenchmarkFilter1000NodesMemo(b *testing.B) { benchMemo(b, 1000) }
func BenchmarkFilter5000NodesMemo(b *testing.B) { benchMemo(b, 5000) }

func benchMemo(b *testing.B, n int) {
	ctx := context.Background()
	h, nodes := fleet(n)
	h.scores = map[string]float64{}
	for i, node := range nodes {
		for d := 0; d < 8; d++ {
			h.scores[deviceKey(driver, node, fmt.Sprintf("gpu-%d", d))] = float64((i*7 + d*13) % 100)
		}
	}
	req := &request{Claims: []*resourceapi.ResourceClaim{oneGPUClaim("c")}, Nodes: nodes, Memo: true}
	h.filter(ctx, req)
	i := 0
	runs := 0
	b.ResetTimer()
	for b.Loop() {
		r := h.filter(ctx, req)
		runs += h.lastRuns
		n := nodes[i%len(nodes)]
		i++
		req.Inflight = append(req.Inflight, r.Nodes[n].Allocations...)
		if len(req.Inflight) > 64 {
			req.Inflight = req.Inflight[1:]
		}
	}
	b.ReportMetric(float64(runs)/float64(b.N), "allocatorRuns/op")
}
