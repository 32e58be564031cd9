//go:build unwound_nohttp

package main

import (
	"errors"

	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/uploader"
)

// Built with -tags unwound_nohttp: a serial-only board links no net/http.
func newHTTP(*config.Config) (uploader.Transport, error) {
	return nil, errors.New("this unwound-uploader was built without HTTP (-tags unwound_nohttp)")
}
