module github.com/unwound-dev/unwound

go 1.22

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/ianlancetaylor/demangle v0.0.0-20260724033716-83e58baca724
	github.com/klauspost/compress v1.18.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.1
	github.com/ulikunitz/xz v0.5.15
	go.bug.st/serial v1.6.4
	golang.org/x/sys v0.30.0
)

require (
	github.com/creack/goselect v0.1.2 // indirect
	golang.org/x/text v0.14.0 // indirect
)
