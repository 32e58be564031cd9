//go:build !unwound_nohttp

package main

import (
	"github.com/unwound-dev/unwound/config"
	"github.com/unwound-dev/unwound/internal/version"
	"github.com/unwound-dev/unwound/uploader"
	"github.com/unwound-dev/unwound/uploader/httpup"
)

func newHTTP(cfg *config.Config) (uploader.Transport, error) {
	return httpup.New(httpup.Config{
		URL: cfg.Upload.URL, Token: cfg.Upload.Token, TokenFile: cfg.Upload.TokenFile,
		CAFile: cfg.Upload.CAFile, ClientCert: cfg.Upload.ClientCert, ClientKey: cfg.Upload.ClientKey,
		Timeout: cfg.Upload.Timeout.D(), UserAgent: "unwound-uploader/" + version.Version,
	})
}
