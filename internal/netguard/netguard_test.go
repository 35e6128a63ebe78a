package netguard

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for addr, refused := range map[string]bool{
		"127.0.0.1:80": true, "[::1]:443": true, "10.1.2.3:80": true, "172.16.0.1:80": true, "192.168.1.1:80": true,
		"169.254.169.254:80": true, "[fe80::1]:80": true, "0.0.0.0:80": true, "[::]:80": true, "[::ffff:127.0.0.1]:80": true,
		"[fc00::1]:80": true, "0.1.2.3:80": true,
		"93.184.216.34:443": false, "[2606:4700::1111]:443": false, "8.8.8.8:53": false,
	} {
		err := Check(addr, "ALLOW=true")
		if got := errors.Is(err, ErrRefused); got != refused {
			t.Errorf("Check(%s) = %v, want refused %v", addr, err, refused)
		}
		if refused && !strings.Contains(err.Error(), "set ALLOW=true") {
			t.Errorf("Check(%s) = %v, want it to name the setting that allows it", addr, err)
		}
	}
}
