package config_test

import (
	"fmt"

	"github.com/mrgw/mrgw/config"
)

// A configuration with three mistakes: Parse reports all of them, each with
// its key.
func ExampleParse() {
	yaml := []byte(`
node: {name: gw1, region: eu-west}
wan:
  mtuu: 9000
  planes: [{name: a, local: "10.0.0.300:15000"}]
control:
  tls: {ca_file: ca.pem, cert_file: gw1.pem, key_file: gw1-key.pem}
log: {level: verbose}
lan: {allow_unauthenticated_hosts: true}
`)
	_, err := config.Parse(yaml, "yaml", "", config.SkipFileChecks())
	fmt.Println(err)
	// Output:
	// 3 problems:
	//   wan.mtuu: unknown key (did you mean "mtu"?)
	//   wan.planes[0].local: "10.0.0.300:15000" is not an IP address
	//   log.level: "verbose" is not one of debug, info, warn, error
}
