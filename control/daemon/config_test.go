// SPDX-License-Identifier: Apache-2.0

package daemon

import (
	"strings"
	"testing"
)

// TestValidateEtcdPrefix: --etcd-prefix starts and ends in "/".
func TestValidateEtcdPrefix(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"other prefix", func(c *Config) { c.EtcdPrefix = "/lab-a/" }, ""},
		{"prefix without trailing slash", func(c *Config) { c.EtcdPrefix = "/lab-a" }, `--etcd-prefix "/lab-a": want a key prefix that starts and ends in "/"`},
		{"relative prefix", func(c *Config) { c.EtcdPrefix = "lab-a/" }, `--etcd-prefix "lab-a/"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			c.Store, c.EtcdEndpoints = "etcd", []string{"http://127.0.0.1:2379"}
			tc.edit(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate = %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
