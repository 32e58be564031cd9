// Package webtest drives the collector's page (host/web) in a real
// browser: headless Chromium from Debian, through the DevTools protocol
// (github.com/chromedp/chromedp). chromedp needs a newer Go than the main
// module's go 1.22, so the test is a module of its own, with the main
// module replaced by the tree it sits in.
package webtest
