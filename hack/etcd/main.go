// etcd for the local control plane, built from the etcd server module (the module that holds
// etcd's own main is not served by the module proxy here; its main is these lines).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
