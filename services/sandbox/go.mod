module github.com/aiforge/aiforge/services/sandbox

go 1.26.8

replace github.com/aiforge/aiforge/pkg => ../../pkg

require github.com/aiforge/aiforge/pkg v0.0.0
