() => setTimeout(() => window.dispatchEvent(new Event('resize')), 60)
