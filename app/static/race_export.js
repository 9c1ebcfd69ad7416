window.rxRaceMount(document.getElementById('race'), JSON.parse(document.getElementById('race-data').textContent), {});
