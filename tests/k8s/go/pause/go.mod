module squall.dev/k8s-test/pause

go 1.26
