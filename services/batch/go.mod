module github.com/aiforge/aiforge/services/batch

go 1.26.8

require github.com/aiforge/aiforge/pkg v0.0.0

replace github.com/aiforge/aiforge/pkg => ../../pkg
