module github.com/aiforge/aiforge/services/guardian

go 1.26
