// Package layers holds only a test: the rule that imports follow the data's
// path through the tree (see layers_test.go and CONTRIBUTING.md).
package layers
