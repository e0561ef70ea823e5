// Package deploy holds no code: it is the home of the deployment files
// (terraform/, systemd/, sysctl/, prometheus/, grafana/) and of the tests that
// check them: the Terraform example renders configurations that pass
// `mrgw config check`, the module's validation refuses bad input, the
// systemd unit verifies, the sysctl file allows the socket buffers the
// gateway asks for, and every metric the dashboard and the alert rules
// name is one the daemon exports (package metrics).
package deploy
