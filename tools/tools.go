//go:build tools

// Package tools pins the modules the project builds with, so that go.mod
// lists them before every package that uses them exists.
package tools

import (
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/hashicorp/hcl/v2/gohcl"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/pierrec/lz4/v4"
	_ "github.com/twmb/franz-go/pkg/kadm"
	_ "github.com/twmb/franz-go/pkg/kfake"
	_ "github.com/twmb/franz-go/pkg/kgo"
)
