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
	modernc.org/sqlite v1.36.0
)

require (
	github.com/creack/goselect v0.1.2 // indirect
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/ncruces/go-strftime v0.1.9 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/exp v0.0.0-20230315142452-642cacee5cc0 // indirect
	golang.org/x/text v0.14.0 // indirect
	modernc.org/libc v1.61.13 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.8.2 // indirect
)
