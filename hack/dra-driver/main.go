// Command dra-driver is a small DRA driver for loadwise's local cluster (issue 50): a kubelet
// plugin built on k8s.io/dynamic-resource-allocation/kubeletplugin that publishes a
// ResourceSlice of simulated GPUs for its node and prepares claims for the kubelet, so that a
// pod with a ResourceClaim runs on the real node. The example driver's module is not served
// here, and this machine has no GPU: Prepare hands the kubelet no CDI device (Debian's
// containerd 1.6 would drop it anyway), which is enough for scheduling and for the kubelet's
// check that the pod is in the claim's reservedFor.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"
)

type driver struct{ name string }

func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var result kubeletplugin.PrepareResult
		if claim.Status.Allocation == nil {
			result.Err = fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
		} else {
			for _, r := range claim.Status.Allocation.Devices.Results {
				if r.Driver != d.name {
					continue
				}
				result.Devices = append(result.Devices, kubeletplugin.Device{
					Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
				})
			}
		}
		out[claim.UID] = result
	}
	return out, nil
}

func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		out[claim.UID] = nil
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "dra-driver: %s: %v\n", msg, err)
}

func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may write ResourceSlices")
	node := flag.String("node", "", "the node's name")
	name := flag.String("driver", "gpu.loadwise.dev", "the driver's name")
	devices := flag.Int("devices", 2, "simulated GPUs to publish")
	root := flag.String("kubelet-root", "/var/lib/kubelet", "the kubelet's --root-dir")
	flag.Parse()
	if err := run(*kubeconfig, *node, *name, *devices, *root); err != nil {
		fmt.Fprintln(os.Stderr, "dra-driver:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, node, name string, count int, root string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pluginDir := filepath.Join(root, "plugins", name)
	registry := filepath.Join(root, "plugins_registry")
	// Both may not exist yet: the kubelet makes them as it starts, and watches the registry
	// for our socket whether it made the directory or found it.
	for _, dir := range []string{pluginDir, registry} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
	}
	helper, err := kubeletplugin.Start(ctx, &driver{name},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.DriverName(name),
		kubeletplugin.RegistrarDirectoryPath(registry),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()
	devs := make([]resourceapi.Device, count)
	for i := range devs {
		devs[i] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index": {IntValue: ptr.To(int64(i))},
				"uuid":  {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
			},
		}
	}
	resources := resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		node: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}}
	if err := helper.PublishResources(ctx, resources); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "dra-driver: %s serving %d devices on %s\n", name, count, node)
	<-ctx.Done()
	return nil
}
