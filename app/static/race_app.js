let shownPhase = null;
const mount = () => {
  const root = element.querySelector('.rx-race-root');
  if (!root || !props.value) return;
  const P = JSON.parse(props.value);
  window.rxRaceMount(root, P, {inspect: (i) => trigger('click', {lane: i})});
  // a race starting: its lanes in view (the controls above them are a screen high at 1280x720)
  if (P.phase === 'live' && shownPhase !== 'live') {
    (document.querySelector('#rx-race-status') || root).scrollIntoView({block: 'start'});
  }
  shownPhase = P.phase;
};
watch('value', mount);
mount();
