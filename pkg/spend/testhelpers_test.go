package spend

// ValidPeriod reports whether p names a budget period ("" means total).
func ValidPeriod(p string) bool {
	switch p {
	case "", PeriodDaily, PeriodWeekly, PeriodMonthly, PeriodTotal:
		return true
	}
	return false
}
