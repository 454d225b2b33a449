package spend

import "time"

// ValidPeriod reports whether p names a budget period ("" means total).
func ValidPeriod(p string) bool {
	switch p {
	case "", PeriodDaily, PeriodWeekly, PeriodMonthly, PeriodTotal:
		return true
	}
	return false
}

// PeriodEnd is when the period containing t ends (the budget resets); the
// zero time for a total budget.
func PeriodEnd(period string, t time.Time) time.Time {
	t = t.UTC()
	day := time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
	switch period {
	case PeriodDaily:
		return day.AddDate(0, 0, 1)
	case PeriodWeekly:
		wd := int(day.Weekday()+6) % 7 // Monday = 0
		return day.AddDate(0, 0, 7-wd)
	case PeriodMonthly:
		return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Time{}
}
