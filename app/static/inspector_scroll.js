() => setTimeout(() => document.querySelector('#rx-inspector')?.scrollIntoView({block: 'start'}), 100)
